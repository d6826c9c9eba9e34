//! The space of a cache device's ring, as arithmetic: where the next record goes, when the
//! evict hand must move and what it uncovers. `larch-l2`'s writer keeps its hands in a
//! [`RingSpace`] and the simulator runs the same one against its device models, so both
//! place records and evict alike.
//!
//! Positions are *ring positions*: bytes since the device was formatted, counting every
//! lap, so "older than" is `<`. Device offset = ring start + position mod ring size. The
//! **write hand** is where the next item goes; the **evict hand** runs ahead of it, and
//! the ring space between them may be overwritten. Every record below the **evict floor**
//! (evict hand − one ring) lies in space the hand has passed: it is dead. An item never
//! straddles the ring's end: the hand skips the tail instead. When a batch would end past
//! the evict hand, the hand moves to the batch's end plus `evict_ahead_bytes`, so that
//! small batches do not each need a header write to move it.

/// The hands of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSpace {
    ring_bytes: u64,
    sector_bytes: u64,
    write_pos: u64,
    evict_pos: u64,
    evict_ahead_bytes: u64,
}

/// Where a batch of items goes and what it does to the hands, before any I/O.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingPlan {
    /// The position of each item, in order.
    pub positions: Vec<u64>,
    /// The write hand after the batch.
    pub end_pos: u64,
    /// The evict hand the batch needs (`None`: the current one covers it).
    pub evict_pos: Option<u64>,
    /// Bytes skipped at the ring's end.
    pub gap_bytes: u64,
}

impl RingSpace {
    /// A formatted, empty ring of `ring_bytes` in sectors of `sector_bytes` (a power of
    /// two), both hands at 0, the evict hand moved 1/16 of the ring (at most 64 MiB)
    /// ahead of what a batch needs.
    pub fn new(ring_bytes: u64, sector_bytes: u64) -> RingSpace {
        RingSpace::resume(ring_bytes, sector_bytes, 0, 0)
    }

    /// A ring whose hands are where a device header left them.
    pub fn resume(ring_bytes: u64, sector_bytes: u64, write_pos: u64, evict_pos: u64) -> RingSpace {
        debug_assert!(sector_bytes.is_power_of_two(), "sector {sector_bytes}");
        let mut space = RingSpace {
            ring_bytes,
            sector_bytes,
            write_pos,
            evict_pos,
            evict_ahead_bytes: 0,
        };
        space.set_evict_ahead_bytes((ring_bytes / 16).min(64 << 20));
        space
    }

    /// How far past a batch's end the evict hand moves when it must move (bigger means
    /// fewer header writes): clamped to one sector..=1/16 of the ring, in whole sectors.
    pub fn set_evict_ahead_bytes(&mut self, bytes: u64) {
        let max = (self.ring_bytes / 16).max(self.sector_bytes);
        self.evict_ahead_bytes = self.asize(bytes.clamp(self.sector_bytes, max));
    }

    /// Bytes in the ring.
    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// The most ring bytes one batch may span (its records, log blocks and a skipped
    /// tail): a quarter of the ring. `larch-l2`'s writer refuses a longer batch
    /// (`BatchTooLarge`) and a feed sizes its data to fit
    /// ([`crate::feed::batch_data_limit`]).
    pub fn max_batch_bytes(&self) -> u64 {
        self.ring_bytes / 4
    }

    /// The allocation unit.
    pub fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    /// Where the next item goes (before fitting).
    pub fn write_pos(&self) -> u64 {
        self.write_pos
    }

    /// The evict hand.
    pub fn evict_pos(&self) -> u64 {
        self.evict_pos
    }

    /// Every record at a position below this is dead (the evict hand minus one ring).
    pub fn evict_floor(&self) -> u64 {
        self.evict_pos.saturating_sub(self.ring_bytes)
    }

    /// Whether the evict hand is still in its first lap (nothing was overwritten yet).
    pub fn first_sweep(&self) -> bool {
        self.evict_pos <= self.ring_bytes
    }

    /// `bytes` rounded up to whole sectors.
    pub fn asize(&self, bytes: u64) -> u64 {
        bytes.next_multiple_of(self.sector_bytes)
    }

    /// The first position at or after `pos` where `asize` bytes fit without crossing the
    /// ring's end.
    pub fn fit(&self, pos: u64, asize: u64) -> u64 {
        fit(self.ring_bytes, pos, asize)
    }

    /// Places items of the given sizes (rounded up to sectors) one after the other from
    /// the write hand, and says where the evict hand must then be.
    pub fn plan(&self, sizes: impl IntoIterator<Item = u64>) -> RingPlan {
        let mut plan = RingPlan {
            end_pos: self.write_pos,
            ..RingPlan::default()
        };
        for size in sizes {
            let pos = self.place(&mut plan, self.asize(size));
            plan.positions.push(pos);
        }
        plan.evict_pos = self.evict_hand_for(plan.end_pos);
        plan
    }

    /// Places one item of `asize` bytes at the end of `plan` (skipping the ring's tail if
    /// it does not fit there) and returns its position. For callers that interleave
    /// items of their own (log blocks) with records.
    pub fn place(&self, plan: &mut RingPlan, asize: u64) -> u64 {
        let pos = self.fit(plan.end_pos, asize);
        plan.gap_bytes += pos - plan.end_pos;
        plan.end_pos = pos + asize;
        pos
    }

    /// The evict hand a batch ending at `end_pos` needs: `None` when the current hand
    /// covers it, else the batch's end plus the evict-ahead distance.
    pub fn evict_hand_for(&self, end_pos: u64) -> Option<u64> {
        (end_pos > self.evict_pos).then(|| end_pos + self.evict_ahead_bytes)
    }

    /// Moves the evict hand forward to `evict_pos` (never back).
    pub fn advance_evict(&mut self, evict_pos: u64) {
        debug_assert!(evict_pos >= self.evict_pos, "the evict hand moves forward");
        self.evict_pos = self.evict_pos.max(evict_pos);
    }

    /// Moves the write hand to `end_pos`, the end of a written batch.
    pub fn advance_write(&mut self, end_pos: u64) {
        debug_assert!(
            end_pos >= self.write_pos && end_pos <= self.evict_pos,
            "write hand {end_pos} outside {}..={}",
            self.write_pos,
            self.evict_pos
        );
        self.write_pos = end_pos;
    }

    /// Applies a plan: the evict hand first (a device makes it durable before writing),
    /// then the write hand. Returns the new evict floor.
    pub fn apply(&mut self, plan: &RingPlan) -> u64 {
        if let Some(evict) = plan.evict_pos {
            self.advance_evict(evict);
        }
        self.advance_write(plan.end_pos);
        self.evict_floor()
    }
}

/// The first position at or after `pos` where `asize` bytes fit in a ring of `ring_bytes`
/// without crossing its end.
pub fn fit(ring_bytes: u64, pos: u64, asize: u64) -> u64 {
    let lap_offset = pos % ring_bytes;
    if lap_offset + asize <= ring_bytes {
        pos
    } else {
        pos - lap_offset + ring_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_placed_in_sectors_and_never_straddle_the_end() {
        let ring = RingSpace::new(64 << 10, 4096);
        let plan = ring.plan([4096, 100, 8192]);
        assert_eq!(plan.positions, vec![0, 4096, 8192]);
        assert_eq!(plan.end_pos, 16384);
        assert_eq!(plan.gap_bytes, 0);
        let mut late = RingSpace::resume(64 << 10, 4096, 60 << 10, 128 << 10);
        let plan = late.plan([8192]);
        assert_eq!(plan.positions, vec![64 << 10], "the tail is skipped");
        assert_eq!(plan.gap_bytes, 4096);
        assert_eq!(plan.evict_pos, None, "the hand is far ahead");
        late.apply(&plan);
        assert_eq!(late.write_pos(), 72 << 10);
    }

    #[test]
    fn the_evict_hand_moves_ahead_of_a_batch_and_uncovers_one_ring_behind() {
        let mut ring = RingSpace::new(256 << 10, 4096);
        ring.set_evict_ahead_bytes(8192);
        let plan = ring.plan([64 << 10]);
        assert_eq!(plan.evict_pos, Some((64 << 10) + 8192));
        assert_eq!(ring.apply(&plan), 0, "first lap: nothing is dead");
        assert!(ring.first_sweep());
        // Fill past one lap: the floor follows the hand one ring behind.
        for _ in 0..5 {
            let plan = ring.plan([64 << 10]);
            ring.apply(&plan);
        }
        assert_eq!(ring.write_pos(), 384 << 10);
        assert_eq!(ring.evict_pos(), (384 << 10) + 8192);
        assert_eq!(ring.evict_floor(), (128 << 10) + 8192);
        assert!(!ring.first_sweep());
    }

    #[test]
    fn evict_ahead_is_clamped() {
        let mut ring = RingSpace::new(64 << 10, 4096);
        ring.set_evict_ahead_bytes(1);
        assert_eq!(ring.plan([4096]).evict_pos, Some(8192));
        ring.set_evict_ahead_bytes(1 << 30);
        assert_eq!(ring.plan([4096]).evict_pos, Some(4096 + 4096));
    }
}

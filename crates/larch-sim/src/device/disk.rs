//! Hard disks and the mirror vdev ZFS builds from them (RAID-Z is in `raidz`).

use super::spec::{check_non_negative, check_positive};
use super::{
    Device, DeviceStats, IoId, IoKind, Joins, NS_PER_MS, Nanos, Queued, SpecError, format_capacity,
    member_seeds, ns_per_byte, round_ns,
};
use std::collections::VecDeque;

use crate::workload::SplitMix64;

/// The default sector: the seed systems' 2009-era disks had 512-byte sectors (ZFS
/// `ashift=9`); 4,096-byte "Advanced Format" sectors first shipped in 2010.
const SECTOR_BYTES: u64 = 512;

/// The largest sector a disk may have: ZFS's largest `ashift`, 16 (64 KiB).
const MAX_SECTOR_BYTES: u64 = 1 << 16;

/// The default command queue: SATA's Native Command Queuing holds up to 32 commands
/// (Serial ATA II, Extensions to Serial ATA 1.0a, 2004), the seed disks' interface.
const NCQ_DEPTH: u32 = 32;

/// The deepest command queue a disk may have: SAS and SCSI tagged queuing allow a few
/// hundred commands; a bound keeps a decision's scan short.
pub const MAX_QUEUE_DEPTH: u32 = 1024;

/// The parameters of one hard disk. The defaults describe a 1 TB 7,200 rpm enterprise SATA
/// disk of 2008-9, the "1 Tbyte 7,200 RPM disks" of seed 000's Sun Storage 7410.
#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    /// Bytes the disk holds. Default 10^12 (1 TB as vendors count).
    pub capacity_bytes: u64,
    /// Spindle speed, revolutions per minute. Default 7,200.
    pub rpm: f64,
    /// Seek time for the shortest nonzero distance (track to track), ms. Default 0.8.
    pub settle_ms: f64,
    /// Seek time across the whole disk, ms. Default 15.2, which with the square-root curve
    /// makes the average seek between two random points 8.48 ms.
    pub full_stroke_ms: f64,
    /// Media transfer rate, 10^6 bytes per second (one figure for the whole disk). Default 150.
    pub transfer_mb_s: f64,
    /// The sector, bytes: the unit RAID-Z lays a block out in (ZFS's `ashift`, `1 << ashift`
    /// bytes). A power of two from 512 to 64 KiB. Default 512, the seed disks' sector.
    pub sector_bytes: u64,
    /// Commands the disk holds and reorders, shortest positioning time first, when its
    /// I/O comes through [`Device::queue`]; 1 serves in arrival order. Default 32 (SATA
    /// NCQ).
    pub queue_depth: u32,
}

impl Default for HddParams {
    fn default() -> HddParams {
        HddParams {
            capacity_bytes: 1_000_000_000_000,
            rpm: 7200.0,
            settle_ms: 0.8,
            full_stroke_ms: 15.2,
            transfer_mb_s: 150.0,
            sector_bytes: SECTOR_BYTES,
            queue_depth: NCQ_DEPTH,
        }
    }
}

impl HddParams {
    /// Checks every field; the error names the first bad one and its value.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !self.sector_bytes.is_power_of_two()
            || !(SECTOR_BYTES..=MAX_SECTOR_BYTES).contains(&self.sector_bytes)
        {
            return Err(SpecError::bad(
                "sector",
                format!("a power of two from {SECTOR_BYTES} to {MAX_SECTOR_BYTES} bytes"),
                self.sector_bytes,
            ));
        }
        if self.capacity_bytes < self.sector_bytes {
            return Err(SpecError::bad(
                "capacity",
                format!("at least one sector ({} bytes)", self.sector_bytes),
                self.capacity_bytes,
            ));
        }
        check_positive("rpm", self.rpm)?;
        check_non_negative("settle_ms", self.settle_ms)?;
        check_positive("full_stroke_ms", self.full_stroke_ms)?;
        if self.full_stroke_ms < self.settle_ms {
            return Err(SpecError::bad(
                "full_stroke_ms",
                format!("at least settle_ms ({})", self.settle_ms),
                self.full_stroke_ms,
            ));
        }
        check_positive("transfer_mb_s", self.transfer_mb_s)?;
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.queue_depth) {
            return Err(SpecError::bad(
                "queue_depth",
                format!("a whole number from 1 to {MAX_QUEUE_DEPTH}"),
                self.queue_depth,
            ));
        }
        Ok(())
    }

    /// One revolution, ns: the longest rotational latency.
    fn revolution_ns(&self) -> f64 {
        60.0 / self.rpm * 1e9
    }

    /// The seek time over `distance` bytes, ns. Zero for no movement; otherwise the settle
    /// time plus a term growing with the square root of the distance, reaching the full
    /// stroke at the far end. Ruemmler and Wilkes ("An introduction to disk drive modeling",
    /// 1994) fit short seeks with a + b*sqrt(d) and long ones with a linear term; the square
    /// root alone over the whole stroke is an approximation that favours short seeks, which
    /// is where a small working set keeps the head.
    fn seek_ns(&self, distance: u64) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let fraction = distance as f64 / self.capacity_bytes as f64;
        (self.settle_ms + (self.full_stroke_ms - self.settle_ms) * fraction.sqrt()) * NS_PER_MS
    }

    /// "7200 rpm 1 TB HDD", for descriptions.
    pub(crate) fn describe(&self) -> String {
        let sector = match self.sector_bytes {
            SECTOR_BYTES => String::new(),
            bytes => format!(" ({bytes} B sectors)"),
        };
        format!(
            "{} rpm {} HDD{sector}",
            self.rpm,
            format_capacity(self.capacity_bytes)
        )
    }
}

/// A hard disk: service time = positioning (seek by distance + rotational latency) +
/// transfer.
///
/// The head's position is tracked (after an I/O it rests at the I/O's end). Rotational
/// latency is drawn uniformly from one revolution, except for an I/O that starts exactly
/// where the previous one ended and was queued before that one finished: the platter is then
/// already in place, so a queued sequential stream pays neither seek nor rotation.
///
/// Through [`Device::submit`] the disk serves in arrival order. Through [`Device::queue`],
/// with a `queue_depth` above 1, it holds the I/Os and, each time it falls idle, serves the
/// one of the first `queue_depth` waiting (its command queue; the host keeps the rest in
/// order) with the shortest positioning time from where its head is: shortest positioning
/// time first (SPTF; Jacobson and Wilkes, "Disk scheduling algorithms based on rotational
/// position", HP Labs 1991; Worthington, Ganger and Patt, SIGMETRICS 1994). Each waiting
/// I/O's rotational latency is drawn afresh at each choice: where a target lies on the
/// platter relative to the head after the previous service is uniform, as that service's
/// own length is. With one I/O waiting the choice is the arrival order, and at queue depth
/// 1 `queue` is `submit`.
#[derive(Clone, Debug)]
pub struct Hdd {
    params: HddParams,
    rng: SplitMix64,
    head_bytes: u64,
    free_at: Nanos,
    pub(super) stats: DeviceStats,
    /// I/Os waiting, in arrival order.
    held: VecDeque<HeldIo>,
    /// The sum of their `expected_ns`.
    held_expected_ns: f64,
    next_id: IoId,
}

/// An I/O a disk holds.
#[derive(Clone, Copy, Debug)]
struct HeldIo {
    id: IoId,
    kind: IoKind,
    target: u64,
    len: u32,
    arrived: Nanos,
    /// Its service as a mirror's choice counts it: the seek from where the head was when
    /// it arrived, half a revolution and its transfer.
    expected_ns: f64,
}

impl Hdd {
    /// A disk with `params`, its rotation drawn from a generator seeded with `seed`.
    pub fn new(params: HddParams, seed: u64) -> Result<Hdd, SpecError> {
        params.validate()?;
        Ok(Hdd::named("hdd", params, seed))
    }

    /// A disk already validated, with the member name an array gives it.
    pub(super) fn named(name: impl Into<String>, params: HddParams, seed: u64) -> Hdd {
        Hdd {
            params,
            rng: SplitMix64::new(seed),
            head_bytes: 0,
            free_at: 0,
            stats: DeviceStats::named(name),
            held: VecDeque::new(),
            held_expected_ns: 0.0,
            next_id: 0,
        }
    }

    /// The disk's parameters.
    pub fn params(&self) -> &HddParams {
        &self.params
    }

    /// The completion time the disk would give this I/O if its rotational latency were the
    /// average, half a revolution, and it were served after the I/Os the disk holds, each
    /// taking its seek from where the head was when it arrived, half a revolution and its
    /// transfer. A mirror uses it to choose a side without drawing from either side's random
    /// source.
    pub fn expected_completion(&self, now: Nanos, offset: u64, len: u32) -> Nanos {
        let target = offset.min(self.params.capacity_bytes);
        let rotation_ns = if self.held.is_empty() && self.streams(now, target) {
            0.0
        } else {
            self.params.revolution_ns() / 2.0
        };
        let service = self.positioning_ns(target) + rotation_ns + self.transfer_ns(len);
        now.max(self.free_at)
            .saturating_add(round_ns(self.held_expected_ns))
            .saturating_add(round_ns(service))
    }

    /// The waiting I/O the disk serves next if it starts at `start`, with its positioning
    /// time: of the first `queue_depth` that arrived by then, the shortest.
    fn shortest_positioning(&mut self, start: Nanos) -> (usize, f64) {
        let depth = self.params.queue_depth as usize;
        let mut best = (0, f64::INFINITY);
        for (i, io) in self.held.iter().take(depth).enumerate() {
            if io.arrived > start {
                break;
            }
            let rotation_ns = if self.streams(io.arrived, io.target) {
                0.0
            } else {
                self.rng.next_f64() * self.params.revolution_ns()
            };
            let positioning_ns = self.positioning_ns(io.target) + rotation_ns;
            if positioning_ns < best.1 {
                best = (i, positioning_ns);
            }
        }
        best
    }

    /// Serves `kind` of `len` bytes at `target`, starting at `start` after `positioning_ns`;
    /// returns when it completes.
    fn serve(
        &mut self,
        start: Nanos,
        kind: IoKind,
        target: u64,
        len: u32,
        positioning_ns: f64,
    ) -> Nanos {
        let service = round_ns(positioning_ns + self.transfer_ns(len));
        let done = start.saturating_add(service);
        self.head_bytes = target
            .saturating_add(u64::from(len))
            .min(self.params.capacity_bytes);
        self.free_at = done;
        self.stats.record(kind, len, service);
        done
    }

    /// Whether an I/O at `target` continues a queued sequential stream.
    fn streams(&self, now: Nanos, target: u64) -> bool {
        target == self.head_bytes && now < self.free_at
    }

    fn positioning_ns(&self, target: u64) -> f64 {
        self.params.seek_ns(self.head_bytes.abs_diff(target))
    }

    fn transfer_ns(&self, len: u32) -> f64 {
        f64::from(len) * ns_per_byte(self.params.transfer_mb_s)
    }
}

impl Device for Hdd {
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos {
        debug_assert!(
            self.held.is_empty(),
            "a disk is driven through submit or through queue, not both"
        );
        let target = offset.min(self.params.capacity_bytes);
        let rotation_ns = if self.streams(now, target) {
            0.0
        } else {
            self.rng.next_f64() * self.params.revolution_ns()
        };
        let positioning_ns = self.positioning_ns(target) + rotation_ns;
        self.serve(now.max(self.free_at), kind, target, len, positioning_ns)
    }

    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        if self.params.queue_depth <= 1 {
            return Queued::Done(self.submit(now, kind, offset, len));
        }
        let id = self.next_id;
        self.next_id += 1;
        let target = offset.min(self.params.capacity_bytes);
        let expected_ns =
            self.positioning_ns(target) + self.params.revolution_ns() / 2.0 + self.transfer_ns(len);
        self.held_expected_ns += expected_ns;
        self.held.push_back(HeldIo {
            id,
            kind,
            target,
            len,
            arrived: now,
            expected_ns,
        });
        Queued::Held(id)
    }

    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        while let Some(start) = self.next_start_ns() {
            if start > until {
                break;
            }
            let (pick, positioning_ns) = self.shortest_positioning(start);
            let io = self.held.remove(pick).expect("the pick is held");
            // A sum kept by adding and taking away drifts in its last bits: an empty
            // queue restarts it.
            self.held_expected_ns = if self.held.is_empty() {
                0.0
            } else {
                (self.held_expected_ns - io.expected_ns).max(0.0)
            };
            let done = self.serve(start, io.kind, io.target, io.len, positioning_ns);
            decided.push((io.id, done));
        }
    }

    fn next_start_ns(&self) -> Option<Nanos> {
        self.held.front().map(|io| io.arrived.max(self.free_at))
    }

    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
    }

    fn describe(&self) -> String {
        self.params.describe()
    }

    fn stats(&self) -> Vec<DeviceStats> {
        vec![self.stats.clone()]
    }
}

/// A mirror vdev of two or more identical disks.
///
/// A read goes to one side: the side whose expected completion
/// ([`Hdd::expected_completion`]: its queue, its seek from where its head is, half a
/// revolution and the transfer) is earliest, the first side on a tie. This weighs both the
/// load and the locality of each side, as ZFS's `vdev_mirror` child selection does with its
/// queue-length-plus-seek-penalty load. A write goes to every side and completes when the
/// last side does.
#[derive(Clone, Debug)]
pub struct Mirror {
    sides: Vec<Hdd>,
    joins: Joins,
}

impl Mirror {
    /// A mirror of `sides` disks with `params` (at least 2); member seeds derive from `seed`.
    pub fn new(params: HddParams, sides: u32, seed: u64) -> Result<Mirror, SpecError> {
        if sides < 2 {
            return Err(SpecError::bad(
                "sides",
                "at least 2 disks in a mirror",
                sides,
            ));
        }
        params.validate()?;
        let mut seeds = member_seeds(seed);
        let sides = (0..sides)
            .map(|i| Hdd::named(format!("disk{i}"), params.clone(), seeds()))
            .collect();
        Ok(Mirror {
            sides,
            joins: Joins::default(),
        })
    }

    /// The side a read would go to now.
    fn choose_side(&self, now: Nanos, offset: u64, len: u32) -> usize {
        let mut best = 0;
        let mut best_done = Nanos::MAX;
        for (i, side) in self.sides.iter().enumerate() {
            let done = side.expected_completion(now, offset, len);
            if done < best_done {
                best = i;
                best_done = done;
            }
        }
        best
    }
}

impl Device for Mirror {
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos {
        match kind {
            IoKind::Read => {
                let side = self.choose_side(now, offset, len);
                self.sides[side].submit(now, kind, offset, len)
            }
            IoKind::Write => self
                .sides
                .iter_mut()
                .map(|side| side.submit(now, kind, offset, len))
                .fold(now, Nanos::max),
        }
    }

    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        let id = self.joins.open(now);
        match kind {
            IoKind::Read => {
                let side = self.choose_side(now, offset, len);
                let part = self.sides[side].queue(now, kind, offset, len);
                self.joins.part(id, side, part);
            }
            IoKind::Write => {
                for (i, side) in self.sides.iter_mut().enumerate() {
                    let part = side.queue(now, kind, offset, len);
                    self.joins.part(id, i, part);
                }
            }
        }
        self.joins.close(id)
    }

    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        self.joins.decide(&mut self.sides, until, decided);
    }

    fn next_start_ns(&self) -> Option<Nanos> {
        self.joins.next_start_ns(&self.sides)
    }

    fn capacity_bytes(&self) -> u64 {
        self.sides[0].params.capacity_bytes
    }

    fn describe(&self) -> String {
        format!(
            "{}-way mirror of {}",
            self.sides.len(),
            self.sides[0].params.describe()
        )
    }

    fn stats(&self) -> Vec<DeviceStats> {
        self.sides.iter().map(|side| side.stats.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_curve_runs_from_settle_to_full_stroke() {
        let params = HddParams::default();
        assert_eq!(params.seek_ns(0), 0.0);
        assert_eq!(params.seek_ns(params.capacity_bytes), 15.2e6);
        let quarter = params.seek_ns(params.capacity_bytes / 4);
        assert!((quarter - (0.8e6 + 14.4e6 * 0.5)).abs() < 1.0, "{quarter}");
    }

    #[test]
    fn queued_sequential_io_pays_no_rotation() {
        let params = HddParams::default();
        let mut disk = Hdd::new(params.clone(), 1).unwrap();
        let first = disk.submit(0, IoKind::Read, 0, 131_072);
        let second = disk.submit(0, IoKind::Read, 131_072, 131_072);
        let transfer = round_ns(131_072.0 * ns_per_byte(params.transfer_mb_s));
        assert_eq!(second - first, transfer, "first {first} second {second}");
    }

    #[test]
    fn a_later_arrival_waits_for_the_queue() {
        let mut disk = Hdd::new(HddParams::default(), 3).unwrap();
        let first = disk.submit(0, IoKind::Read, 500_000_000_000, 8192);
        let second = disk.submit(1, IoKind::Read, 0, 8192);
        // The second I/O starts when the first ends and then seeks at least the settle time.
        assert!(second >= first + 800_000, "first {first} second {second}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        let params = HddParams {
            full_stroke_ms: 0.5,
            ..HddParams::default()
        };
        let error = Hdd::new(params, 0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "full_stroke_ms: expected at least settle_ms (0.8), got \"0.5\""
        );
        assert!(Mirror::new(HddParams::default(), 1, 0).is_err());
    }
}

//! Storage device models for the discrete-event simulator: hard disks and the arrays ZFS
//! builds from them, flash devices, an object store and RAM, all in virtual time.
//!
//! # Theory
//!
//! A model answers one question: an I/O submitted at virtual time `now`, when does it
//! complete? [`Device::submit`] computes that answer at submission and returns it, and the
//! model remembers when each of its queues falls idle. Three consequences follow.
//!
//! 1. **FIFO per queue.** A request's completion is fixed the moment it is submitted, so a
//!    later arrival can never be served ahead of it on the same queue: there is no elevator
//!    or NCQ reordering on a disk and no scheduler reordering on a flash channel. Real disks
//!    reorder their queues to shorten seeks; at the queue depths of the seed workloads (a few
//!    requests per disk at most) this simplification costs little, and it keeps every model
//!    a short closed form.
//! 2. **Submissions come in time order.** The simulator calls `submit` with nondecreasing
//!    `now`; a model may assume it. A model with several queues (flash channels, object-store
//!    connections) gives each request the queue that falls idle first.
//! 3. **Determinism.** A model that draws random numbers (disk rotation, object-store
//!    latency) owns a [`SplitMix64`](crate::workload::SplitMix64) seeded at construction,
//!    so the same seed and the same submissions give the same completion times on every
//!    run. Arrays derive one seed per member from theirs.
//!
//! The models, each with its parameters in a public struct whose defaults come from published
//! figures (docs/simulator.md, "Device models", gives each default and its source):
//!
//! - [`Hdd`]: a 7,200 rpm disk: seek by distance, uniform rotational latency, transfer.
//! - [`Mirror`], [`RaidZ`]: the vdevs ZFS builds from disks.
//! - [`Pool`]: the primary storage, vdevs striped in chunks as ZFS's dynamic striping does.
//! - [`Ssd`]: flash with independent channels, with presets for the seed systems' cache
//!   devices (`readzilla`, `nvme`) and a generic SATA `ssd`.
//! - [`ObjectStore`]: a remote store with a lognormal latency tail and a connection limit.
//! - [`Ram`]: a fixed latency and unlimited concurrency, for tests.
//!
//! [`parse_spec`] builds any of them from command-line text such as `140xhdd:mirror`.
//!
//! Times are integer nanoseconds ([`Nanos`]); a model computes a service time in `f64`
//! nanoseconds and rounds it once. Arithmetic on times saturates, so no input can overflow.

mod disk;
mod flash;
mod object;
mod pool;
mod raidz;
mod spec;

pub use disk::{Hdd, HddParams, Mirror};
pub use flash::{Ram, RamParams, Ssd, SsdParams};
pub use object::{ObjectStore, ObjectStoreParams};
pub use pool::{DEFAULT_CHUNK_BYTES, Layout, Pool, Primary};
pub use raidz::{Column, RaidZ, RaidZGeometry};
pub use spec::{DeviceSpec, FlashPreset, MAX_DISKS, SpecError, parse_spec};

/// Virtual time, nanoseconds.
pub type Nanos = u64;

/// The direction of an I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// Data moves from the device.
    Read,
    /// Data moves to the device.
    Write,
}

/// A device model in virtual time. `submit` is called in nondecreasing `now` order and returns
/// when the I/O completes; a model keeps its own queues (an I/O submitted while earlier ones
/// hold the device waits) and its own deterministic random source (seeded at construction).
pub trait Device: Send {
    /// Submits an I/O of `len` bytes at `offset` at time `now` and returns its completion
    /// time. An offset past the capacity is clamped to the end: the models time I/O and do
    /// not check addresses.
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos;
    /// Bytes the device (or array) holds for data.
    fn capacity_bytes(&self) -> u64;
    /// One line for reports: "140 x 7200 rpm 1 TB HDD in 70 2-way mirrors", ...
    fn describe(&self) -> String;
    /// I/Os and bytes so far, by kind, and busy time (for utilisation), per member device
    /// where the model has members (a disk array reports one entry per disk), so the
    /// simulator can show "ops by device".
    fn stats(&self) -> Vec<DeviceStats>;
}

/// What one device (or one member of an array) has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// The member's name: `disk0`, `vdev3/disk1` in a pool, `readzilla`, `nvme`, `s3`, ...
    pub name: String,
    /// Reads submitted.
    pub reads: u64,
    /// Writes submitted.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Time spent serving I/O. A member with several parallel servers (flash channels,
    /// object-store connections) reports the mean over its servers, so `busy_ns` divided by
    /// the elapsed time is a utilisation between 0 and 1 for every member. RAM reports 0: it
    /// has no queue to be busy.
    pub busy_ns: u64,
}

impl DeviceStats {
    /// Empty statistics for a member called `name`.
    pub fn named(name: impl Into<String>) -> DeviceStats {
        DeviceStats {
            name: name.into(),
            ..DeviceStats::default()
        }
    }

    /// Counts one I/O and the time it held the member.
    fn record(&mut self, kind: IoKind, len: u32, busy_ns: Nanos) {
        match kind {
            IoKind::Read => {
                self.reads += 1;
                self.read_bytes += u64::from(len);
            }
            IoKind::Write => {
                self.writes += 1;
                self.write_bytes += u64::from(len);
            }
        }
        self.busy_ns = self.busy_ns.saturating_add(busy_ns);
    }
}

/// The smallest piece a pool chunk or a flash stripe may cut a request into: one sector.
/// A bound keeps the work per request finite (a request of at most 4 GiB splits into at most
/// 8 Mi pieces) however the parameters are set.
const MIN_PIECE_BYTES: u64 = 512;

/// Nanoseconds in a millisecond and in a microsecond, for converting parameters.
const NS_PER_MS: f64 = 1e6;
const NS_PER_US: f64 = 1e3;

/// Datasheet megabytes (10^6 bytes), the unit of every bandwidth parameter.
const BYTES_PER_MB: f64 = 1e6;

/// Rounds a service time computed in `f64` nanoseconds to [`Nanos`]. The cast saturates, so
/// a degenerate parameter (a bandwidth of 1e-300 MB/s) gives a very long time, not a panic.
fn round_ns(ns: f64) -> Nanos {
    ns.round() as Nanos
}

/// Nanoseconds per byte at `mb_per_s` datasheet megabytes per second.
fn ns_per_byte(mb_per_s: f64) -> f64 {
    1e9 / (mb_per_s * BYTES_PER_MB)
}

/// One seed per member of an array, drawn from the array's seed, so members do not share a
/// random sequence and the array as a whole stays reproducible.
fn member_seeds(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = crate::workload::SplitMix64::new(seed);
    move || rng.next_u64()
}

/// A capacity in datasheet units for [`Device::describe`]: `1 TB`, `1.6 TB`, `100 GB`.
fn format_capacity(bytes: u64) -> String {
    const UNITS: [(&str, f64); 5] = [
        ("PB", 1e15),
        ("TB", 1e12),
        ("GB", 1e9),
        ("MB", 1e6),
        ("KB", 1e3),
    ];
    let value = bytes as f64;
    for (unit, size) in UNITS {
        if value >= size {
            let scaled = value / size;
            // Two significant decimals are enough to tell presets apart; trailing zeros are
            // dropped so the common round sizes read as vendors print them.
            let text = format!("{scaled:.2}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            return format!("{text} {unit}");
        }
    }
    format!("{bytes} B")
}

/// Bytes per second `dev` streams: sequential reads of `len` bytes from offset 0, `depth`
/// outstanding, for one virtual second from `start` (a device fresh from its spec, so that
/// the probe disturbs no run). Seed 002's key ratio 2 compares this figure of the cache
/// devices with the primary storage's.
pub fn streaming_read_bytes_per_s(
    dev: &mut dyn Device,
    start: Nanos,
    len: u32,
    depth: usize,
) -> f64 {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    const SECOND: Nanos = 1_000_000_000;
    let mut next_offset = 0u64;
    let mut outstanding = BinaryHeap::new();
    for _ in 0..depth.max(1) {
        outstanding.push(Reverse(dev.submit(start, IoKind::Read, next_offset, len)));
        next_offset += u64::from(len);
    }
    // A device whose reads take no virtual time (a spec of zero latency and endless
    // bandwidth) would never reach the second's end: after this many reads, the rate is
    // taken over the time they took (at least a nanosecond).
    const MOST_READS: u64 = 1 << 22;
    let mut bytes = 0u64;
    let mut reads = 0u64;
    while let Some(Reverse(done)) = outstanding.pop() {
        if done > start + SECOND {
            break;
        }
        reads += 1;
        if reads > MOST_READS {
            let elapsed = done.saturating_sub(start).max(1);
            return bytes as f64 * SECOND as f64 / elapsed as f64;
        }
        bytes += u64::from(len);
        if next_offset + u64::from(len) > dev.capacity_bytes() {
            next_offset = 0;
        }
        outstanding.push(Reverse(dev.submit(done, IoKind::Read, next_offset, len)));
        next_offset += u64::from(len);
    }
    bytes as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_read_as_datasheets_print_them() {
        assert_eq!(format_capacity(1_000_000_000_000), "1 TB");
        assert_eq!(format_capacity(1_600_000_000_000), "1.6 TB");
        assert_eq!(format_capacity(100_000_000_000), "100 GB");
        assert_eq!(format_capacity(4 << 40), "4.4 TB");
        assert_eq!(format_capacity(512), "512 B");
    }

    #[test]
    fn stats_count_by_kind() {
        let mut stats = DeviceStats::named("disk0");
        stats.record(IoKind::Read, 8192, 100);
        stats.record(IoKind::Write, 4096, 50);
        stats.record(IoKind::Read, 8192, u64::MAX);
        assert_eq!((stats.reads, stats.writes), (2, 1));
        assert_eq!((stats.read_bytes, stats.write_bytes), (16384, 4096));
        assert_eq!(stats.busy_ns, u64::MAX, "busy time saturates");
    }
}

//! Storage device models for the discrete-event simulator: hard disks and the arrays ZFS
//! builds from them, flash devices, an object store and RAM, all in virtual time.
//!
//! # Theory
//!
//! A model answers one question: an I/O submitted at virtual time `now`, when does it
//! complete? [`Device::submit`] computes that answer at submission and returns it, and the
//! model remembers when each of its queues falls idle. Three consequences follow.
//!
//! 1. **FIFO per queue, but for disks that reorder.** Through [`Device::submit`] a
//!    request's completion is fixed the moment it is submitted, so a later arrival can never
//!    be served ahead of it on the same queue (no scheduler reorders a flash channel), and
//!    each model is a short closed form. A disk has a command queue (SATA NCQ, 32 deep):
//!    through [`Device::queue`] it holds its requests and, each time it falls idle, serves
//!    the one it can reach soonest, so a request's completion is known only when the disk
//!    starts it ([`Device::decide`]). Arrays pass both ways through to their disks.
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
//! - [`Hdd`]: a 7,200 rpm disk: seek by distance, uniform rotational latency, transfer,
//!   and a command queue served shortest positioning time first.
//! - [`Mirror`], [`RaidZ`]: the vdevs ZFS builds from disks; a RAID-Z read reads only its
//!   block's data columns ([`RaidZGeometry`]).
//! - [`Pool`]: the primary storage, vdevs striped in chunks as ZFS's dynamic striping does.
//! - [`Ssd`]: flash with independent channels, with presets for the seed systems' cache
//!   devices (`readzilla`, `nvme`) and a generic SATA `ssd`.
//! - [`ObjectStore`]: a remote store with a lognormal latency tail and a connection limit.
//! - [`Ram`]: a fixed latency and unlimited concurrency, for tests.
//! - [`Server`]: not a storage device but the machine around the cache, its CPU cores and
//!   memory bandwidth as queues a request's work waits in ([`ServerParams`]).
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
mod server;
mod spec;

use rustc_hash::FxHashMap as HashMap;

pub use disk::{Hdd, HddParams, Mirror};
pub use flash::{Ram, RamParams, Ssd, SsdParams};
pub use object::{ObjectStore, ObjectStoreParams};
pub use pool::{DEFAULT_CHUNK_BYTES, Layout, Pool, Primary};
pub use raidz::{Column, RaidZ, RaidZGeometry};
pub use server::{FcfsQueue, MAX_CORES, Server, ServerParams, Work};
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

/// An I/O a device holds: its name until the device decides when it completes.
pub type IoId = u64;

/// What [`Device::queue`] made of an I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queued {
    /// Its completion is decided: this time.
    Done(Nanos),
    /// The device holds it; [`Device::decide`] reports its completion once the device has
    /// chosen when to serve it.
    Held(IoId),
}

/// A device model in virtual time. Calls come in nondecreasing `now` order; a model keeps
/// its own queues (an I/O submitted while earlier ones hold the device waits) and its own
/// deterministic random source (seeded at construction).
///
/// Two ways in. [`Device::submit`] decides at once and returns the completion time: every
/// queue is then first in, first out. [`Device::queue`] lets a device that reorders its
/// queue (a disk with a command queue, [`HddParams::queue_depth`]) hold the I/O until it
/// starts serving it, when it chooses among everything waiting; the caller learns the
/// completion from [`Device::decide`], which it calls at [`Device::next_start_ns`] (or
/// later). A device that does not reorder answers `queue` as `submit` does.
pub trait Device: Send {
    /// Submits an I/O of `len` bytes at `offset` at time `now` and returns its completion
    /// time, served in arrival order. An offset past the capacity is clamped to the end:
    /// the models time I/O and do not check addresses.
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos;
    /// Queues an I/O at `now`, which a reordering device may hold (see the trait's
    /// documentation).
    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        Queued::Done(self.submit(now, kind, offset, len))
    }
    /// Decides every service that starts at or before `until`, choosing among the I/Os
    /// that arrived by its start, and appends each held I/O whose completion is now known,
    /// with that time (after its start), to `decided`. `until = Nanos::MAX` decides
    /// everything held, as if nothing more arrived.
    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        let _ = (until, decided);
    }
    /// When the device next starts serving a held I/O, or `None` when it holds none.
    fn next_start_ns(&self) -> Option<Nanos> {
        None
    }
    /// Bytes the device (or array) holds for data.
    fn capacity_bytes(&self) -> u64;
    /// One line for reports: "140 x 7200 rpm 1 TB HDD in 70 2-way mirrors", ...
    fn describe(&self) -> String;
    /// I/Os and bytes so far, by kind, and busy time (for utilisation), per member device
    /// where the model has members (a disk array reports one entry per disk), so the
    /// simulator can show "ops by device".
    fn stats(&self) -> Vec<DeviceStats>;
}

/// A boxed device is a device: arrays hold their members boxed.
impl<D: Device + ?Sized> Device for Box<D> {
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos {
        (**self).submit(now, kind, offset, len)
    }
    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        (**self).queue(now, kind, offset, len)
    }
    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        (**self).decide(until, decided);
    }
    fn next_start_ns(&self) -> Option<Nanos> {
        (**self).next_start_ns()
    }
    fn capacity_bytes(&self) -> u64 {
        (**self).capacity_bytes()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn stats(&self) -> Vec<DeviceStats> {
        (**self).stats()
    }
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

/// The I/Os of an array (a mirror's write, a RAID-Z block's columns, a pool request's
/// chunks) whose parts its members hold: each completes when its last part does.
#[derive(Clone, Debug, Default)]
struct Joins {
    next_id: IoId,
    /// By the array's id: parts still held, and the latest completion so far.
    open: HashMap<IoId, (u32, Nanos)>,
    /// By (member, the member's id): the array's id.
    parents: HashMap<(usize, IoId), IoId>,
    /// Members holding parts, each once.
    busy: Vec<usize>,
    decided: Vec<(IoId, Nanos)>,
}

impl Joins {
    /// Opens an I/O of the array at `now`.
    fn open(&mut self, now: Nanos) -> IoId {
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id, (0, now));
        id
    }

    /// Adds a part that `member` has taken to the array's I/O `id`.
    fn part(&mut self, id: IoId, member: usize, queued: Queued) {
        let join = self.open.get_mut(&id).expect("parts join an open I/O");
        match queued {
            Queued::Done(at) => join.1 = join.1.max(at),
            Queued::Held(part) => {
                join.0 += 1;
                self.parents.insert((member, part), id);
                if !self.busy.contains(&member) {
                    self.busy.push(member);
                }
            }
        }
    }

    /// Closes the parts of `id`: done if none is held.
    fn close(&mut self, id: IoId) -> Queued {
        match self.open.get(&id) {
            Some(&(0, at)) => {
                self.open.remove(&id);
                Queued::Done(at)
            }
            _ => Queued::Held(id),
        }
    }

    /// Runs `decide` over the busy members and reports the array's I/Os whose last part
    /// was decided.
    fn decide<M: Device>(
        &mut self,
        members: &mut [M],
        until: Nanos,
        decided: &mut Vec<(IoId, Nanos)>,
    ) {
        let mut parts = std::mem::take(&mut self.decided);
        let mut i = 0;
        while i < self.busy.len() {
            let member = self.busy[i];
            parts.clear();
            members[member].decide(until, &mut parts);
            for &(part, at) in &parts {
                let id = self
                    .parents
                    .remove(&(member, part))
                    .expect("a member decides only parts it holds");
                let join = self.open.get_mut(&id).expect("a held part's I/O is open");
                join.0 -= 1;
                join.1 = join.1.max(at);
                if join.0 == 0 {
                    decided.push((id, join.1));
                    self.open.remove(&id);
                }
            }
            if members[member].next_start_ns().is_none() {
                self.busy.swap_remove(i);
            } else {
                i += 1;
            }
        }
        self.decided = parts;
    }

    /// The earliest next start of the busy members.
    fn next_start_ns<M: Device>(&self, members: &[M]) -> Option<Nanos> {
        self.busy
            .iter()
            .filter_map(|&member| members[member].next_start_ns())
            .min()
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

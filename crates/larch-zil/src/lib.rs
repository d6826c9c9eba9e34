//! The intent log (ZIL) of a larch pool on a log device (SLOG).
//!
//! A sync write (NBD FUA, FLUSH, `sync=always`) is acknowledged once its record is durable
//! here; after a crash, [`LogDevice::open`] replays every record newer than the last TXG the
//! backing stores hold. The log is the one place of *group commit*: callers hand it
//! records either all at once ([`LogDevice::commit`], which waits) or one write at a time
//! in the order of the writes ([`LogDevice::append`], cheap enough to call under the lock
//! that orders them) and ask later ([`LogDevice::commit_through`] a ticket); either way
//! whoever finds no block being written leads, writing every waiting record in one block
//! with one flush, and the others wait for it. [`LogDevice::txg_committed`] reclaims space
//! (and drops queued records the backing stores hold). The byte layout is in `docs/zil.md`
//! and its structures in `larch_format::zil`.
//!
//! # Theory
//!
//! The device is a mirrored header (two slots) and a ring of *log blocks*. A block holds
//! the records of every commit that was waiting when its writer, the *leader*, started:
//! one sequential write (two when it wraps around the ring end) and one flush per block,
//! however many threads are waiting. Places in the ring are *ring positions*, bytes since
//! the format counting every lap, as on a cache device; unlike there, a block may wrap
//! around the ring end, so no space is ever skipped and free space is exact.
//!
//! Every block head names its sequence number (consecutive along the log), its own ring
//! position, the epoch of the open that wrote it, and `prev_checksum`, the head checksum
//! of the block before it. The header names the *tail*: position, sequence number and
//! expected `prev_checksum` of the oldest block not yet reclaimed. Replay starts at the
//! tail and goes forward; a block continues the log only if its head and body verify, its
//! position, sequence and `prev_checksum` are exactly the expected ones, its epoch is
//! neither below its predecessor's nor above the header's, and its committed-TXG stamp is
//! not below its predecessor's. The first block that does not continue the log ends the
//! replay; nothing after it is returned.
//!
//! ## Why replay returns every acknowledged record
//!
//! 1. `commit` returns `Ok` only after the block holding its records was written and a
//!    flush that started after the write returned `Ok`.
//! 2. A block is not overwritten while it is at or after the tail of the last *durable*
//!    header: the leader allocates only below `durable tail + ring size`. The tail moves
//!    past a block only when every record in it is of a TXG ≤ the committed TXG, and only
//!    once the header saying so is flushed.
//! 3. Blocks from the tail to the newest acknowledged block are contiguous and each names
//!    its predecessor, so the walk reaches each of them. Only media damage of a flushed
//!    block can end it early, and checksums make that an end, never a wrong byte.
//!
//! ## Why replay returns nothing else
//!
//! - *Stale blocks from an earlier lap* hold an older position and sequence number.
//! - *Torn blocks* fail their checksums. A block is all or nothing, and only the newest
//!   block can be unflushed at a crash (one leader at a time, one flush per block), so a
//!   torn block was never acknowledged and nothing valid was written after it.
//! - *Leftovers of a crashed run*: `open` makes a header with a new epoch durable before it
//!   writes anything, then resumes right after the last block it replayed. A leftover past
//!   that point names a predecessor that no longer exists (`prev_checksum`) and carries a
//!   lower epoch than the blocks now before it, so it cannot rejoin the log.
//! - *Another pool's or another format's blocks* carry other guids or chain seeds.
//!
//! ## The committed TXG
//!
//! The engine calls [`LogDevice::txg_committed`] once the backing stores hold every write
//! of TXGs ≤ `txg` and are flushed. The number goes into the header (mirrored, flushed)
//! and, as a hint, into every later block head; replay takes the highest it finds and
//! returns only records of newer TXGs. Both are only ever raised to values the engine
//! passed in, so replay never skips a record whose TXG the backing stores may lack.
//!
//! ## Failure
//!
//! A failed write or flush *poisons* the log: the durability of everything since the last
//! good flush is unknown, so it is never retried. Every later `commit` and
//! `txg_committed` fails with [`LogError::Poisoned`]; [`LogDevice::poison_reason`] says
//! why. Reopening the device (which replays) is the way back.

#![warn(missing_docs)]

mod describe;
mod device;
mod queue;
mod walk;

pub use describe::{BlockSummary, LogDescription, SlotState, describe};
pub use device::{CommitInfo, CreateOptions, Led, LogDevice, LogStats};
pub use queue::QueuedRecord;
pub use walk::{Replay, ReplayEnd};

pub use larch_format::zil::{ZIL_RECORD_MAX_DATA_BYTES, ZIL_VERSION};

use std::sync::Arc;

use larch_format::zil::{ZIL_BLOCK_MAX_BODY_BYTES, ZIL_HEADER_SLOT_BYTES, ZilBlockPhys};
use larch_io::IoError;

/// One logged write, as replay returns it.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    /// The TXG the write belongs to (at least 1).
    pub txg: u64,
    /// The volume written.
    pub volume_id: u64,
    /// Byte offset in the volume.
    pub offset_bytes: u64,
    /// The bytes written; the record's length is `data.len()`.
    pub data: Vec<u8>,
}

impl Record {
    /// A borrowed view, as [`LogDevice::commit`] takes it.
    pub fn view(&self) -> RecordRef<'_> {
        RecordRef {
            txg: self.txg,
            volume_id: self.volume_id,
            offset_bytes: self.offset_bytes,
            data: &self.data,
        }
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Data can be megabytes; its length and checksum identify it in test failures.
        f.debug_struct("Record")
            .field("txg", &self.txg)
            .field("volume_id", &self.volume_id)
            .field("offset_bytes", &self.offset_bytes)
            .field("len", &self.data.len())
            .field(
                "xxh3",
                &format_args!("{:#018x}", larch_format::checksum(&self.data)),
            )
            .finish()
    }
}

/// A write to log, borrowing its data: [`LogDevice::commit`] copies the bytes into the
/// log block, so the caller's buffer is free again when `commit` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The TXG the write belongs to (at least 1).
    pub txg: u64,
    /// The volume written.
    pub volume_id: u64,
    /// Byte offset in the volume.
    pub offset_bytes: u64,
    /// The bytes written (at most [`ZIL_RECORD_MAX_DATA_BYTES`]).
    pub data: &'a [u8],
}

impl<'a> From<&'a Record> for RecordRef<'a> {
    fn from(record: &'a Record) -> Self {
        record.view()
    }
}

impl RecordRef<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            txg: self.txg,
            volume_id: self.volume_id,
            offset_bytes: self.offset_bytes,
            data: self.data.to_vec(),
        }
    }
}

/// Bytes a record with `data_bytes` of data takes in a commit: its 64-byte head and its
/// data padded to 8 bytes. A commit's records must add up to at most
/// [`LogDevice::max_commit_bytes`].
pub fn encoded_record_bytes(data_bytes: usize) -> u64 {
    larch_format::zil::ZilRecordPhys::encoded_bytes(data_bytes) as u64
}

/// Errors of a log device. Operating errors (I/O, full, refused device) are values;
/// bugs in larch are panics.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The device failed. If this happened in a commit or a header update, the log is
    /// poisoned from now on.
    #[error("log device I/O: {0}")]
    Io(#[from] IoError),
    /// An earlier write or flush failed; nothing is retried. Reopen the device.
    #[error("log device is poisoned by an earlier failure: {reason}")]
    Poisoned {
        /// The first failure.
        reason: Arc<str>,
    },
    /// The ring has no room for the commit until older TXGs are committed
    /// ([`LogDevice::txg_committed`]). Nothing was written; the engine can force a TXG
    /// sync and retry, or write through to the backing store.
    #[error("log device is full: the commit needs {needed_bytes} bytes, {free_bytes} are free")]
    Full {
        /// Ring bytes the commit would take.
        needed_bytes: u64,
        /// Ring bytes free now.
        free_bytes: u64,
    },
    /// Some of the appended records up to the ticket committed through found no room in
    /// the ring (nothing of them was written; the log stays usable): they are durable
    /// once TXG `txg` is committed, which also frees the room.
    #[error(
        "the log device had no room for records up to TXG {txg}: they wait for it to be committed"
    )]
    Unlogged {
        /// The newest TXG among the records not logged.
        txg: u64,
    },
    /// One commit's records are larger than a log block can hold on this device (half
    /// the ring, at most 16 MiB); split them over several commits.
    #[error("commit of {bytes} bytes exceeds the largest log block body of {max_bytes} bytes")]
    TooLarge {
        /// Encoded bytes of the commit's records.
        bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// A record the log cannot hold (TXG 0, a TXG or offset above 2^62).
    #[error("invalid record: {0}")]
    InvalidRecord(&'static str),
    /// Neither header slot was ever written.
    #[error("no log device header (the device is not formatted as a log device)")]
    Unformatted,
    /// The device holds a larch cache (L2ARC) device header.
    #[error("this is a larch cache (L2ARC) device, not a log device")]
    CacheDevice,
    /// The device holds something else.
    #[error("not a larch log device (magic {found:#018x})")]
    NotALogDevice {
        /// The first eight bytes of the first non-zero header slot.
        found: u64,
    },
    /// The log device was formatted for another pool.
    #[error("log device belongs to pool {found:#018x}, not {expected:#018x}")]
    ForeignPool {
        /// The pool being opened.
        expected: u64,
        /// The pool named by the device.
        found: u64,
    },
    /// The log device is another device of the pool than the one expected.
    #[error("log device guid {found:#018x}, the pool expects {expected:#018x}")]
    ForeignDevice {
        /// The device guid the pool expects.
        expected: u64,
        /// The device guid the header names.
        found: u64,
    },
    /// A header slot holds a log header of a format version this build does not read.
    #[error("log device format version {found} is not supported (this build reads {ZIL_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
    },
    /// No header slot holds a valid header.
    #[error("log device header is damaged in both slots: slot 0: {slot0}; slot 1: {slot1}")]
    DamagedHeader {
        /// Why slot 0 was refused.
        slot0: String,
        /// Why slot 1 was refused.
        slot1: String,
    },
    /// Both slots are valid but describe different devices.
    #[error("log device header slots disagree: {0}")]
    InconsistentHeader(String),
    /// The header's geometry does not fit the device (resized, or not this device).
    #[error("log device geometry does not match the device: {0}")]
    Geometry(String),
    /// A header counter is so high that this device would overflow it; it is refused
    /// rather than trusted (no real device gets near 2^61 updates or bytes). A log whose
    /// counters come within 2^32 of that refuses new records with it too, so every record
    /// it acknowledged stays replayable.
    #[error("log device header {field} = {value} is beyond the usable range")]
    CounterExhausted {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The device is too small to be a log device.
    #[error("device of {device_bytes} bytes is smaller than the minimum {min_bytes}")]
    DeviceTooSmall {
        /// Size of the device.
        device_bytes: u64,
        /// The minimum for this sector size.
        min_bytes: u64,
    },
    /// Options out of range.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
}

impl LogError {
    /// A device that holds no ring: a sector size out of range is an option out of range.
    fn from_ring(err: larch_format::RingError) -> Self {
        match err {
            larch_format::RingError::BadSectorBytes { .. } => {
                LogError::InvalidOptions(err.to_string())
            }
            larch_format::RingError::DeviceTooSmall {
                device_bytes,
                min_bytes,
            } => LogError::DeviceTooSmall {
                device_bytes,
                min_bytes,
            },
        }
    }
}

/// Where the ring lies on a log device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Device offset of the first ring byte.
    pub ring_start: u64,
    /// Device offset one past the last ring byte.
    pub ring_end: u64,
    /// Allocation unit: every block starts on a sector boundary and fills whole sectors.
    pub sector_bytes: u64,
}

/// The smallest ring: 16 KiB, and at least eight sectors. Tiny rings exist for tests;
/// a real log device holds a few seconds of sync writes.
pub const MIN_RING_BYTES: u64 = 16 << 10;

impl Geometry {
    /// The geometry of a device of `device_bytes` with `sector_bytes` sectors: two header
    /// slots, then the ring up to the last whole sector.
    pub fn for_device(device_bytes: u64, sector_bytes: u64) -> Result<Self, LogError> {
        // Saturating: a sector size that would overflow is refused by `ring_span` anyway.
        let min_ring = MIN_RING_BYTES.max(sector_bytes.saturating_mul(8));
        let ring =
            larch_format::ring_span(device_bytes, sector_bytes, ZIL_HEADER_SLOT_BYTES, min_ring)
                .map_err(LogError::from_ring)?;
        Ok(Self {
            ring_start: ring.start,
            ring_end: ring.end,
            sector_bytes,
        })
    }

    /// Bytes in the ring.
    pub fn ring_bytes(&self) -> u64 {
        self.ring_end - self.ring_start
    }

    /// Device offset of ring position `pos`.
    pub fn daddr(&self, pos: u64) -> u64 {
        self.ring_start + pos % self.ring_bytes()
    }

    /// `bytes` rounded up to whole sectors.
    pub fn asize(&self, bytes: u64) -> u64 {
        bytes.next_multiple_of(self.sector_bytes)
    }

    /// The largest body of one block: half the ring less the head, rounded down to a
    /// sector, and at most [`ZIL_BLOCK_MAX_BODY_BYTES`]. Half the ring, so one block of
    /// any legal size fits once the ring is reclaimed.
    pub fn max_body_bytes(&self) -> u64 {
        let half = (self.ring_bytes() / 2) / self.sector_bytes * self.sector_bytes;
        (half - ZilBlockPhys::SIZE as u64).min(u64::from(ZIL_BLOCK_MAX_BODY_BYTES))
    }

    /// The device pieces `(offset, len)` of `len` ring bytes at `pos`: one, or two when
    /// they wrap around the ring end. `len` must not exceed the ring.
    pub(crate) fn pieces(&self, pos: u64, len: u64) -> [(u64, u64); 2] {
        debug_assert!(
            len <= self.ring_bytes(),
            "{len} > ring {}",
            self.ring_bytes()
        );
        let lap_offset = pos % self.ring_bytes();
        let first = len.min(self.ring_bytes() - lap_offset);
        [
            (self.ring_start + lap_offset, first),
            (self.ring_start, len - first),
        ]
    }
}

/// Device offset of header slot `slot` (0 or 1).
pub(crate) fn slot_offset(slot: u64) -> u64 {
    slot * ZIL_HEADER_SLOT_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_bounds_and_pieces() {
        let g = Geometry::for_device(8192 + 65536 + 100, 512).unwrap();
        assert_eq!((g.ring_start, g.ring_end), (8192, 8192 + 65536));
        assert_eq!(g.max_body_bytes(), 32768 - 128);
        assert_eq!(g.pieces(65536 + 1024, 512), [(8192 + 1024, 512), (8192, 0)]);
        assert_eq!(
            g.pieces(65536 - 512, 2048),
            [(8192 + 65024, 512), (8192, 1536)]
        );
        let big = Geometry::for_device(1 << 40, 4096).unwrap();
        assert_eq!(big.max_body_bytes(), u64::from(ZIL_BLOCK_MAX_BODY_BYTES));
        assert!(matches!(
            Geometry::for_device(8192 + 8192, 512),
            Err(LogError::DeviceTooSmall { .. })
        ));
        assert!(matches!(
            Geometry::for_device(1 << 20, 1000),
            Err(LogError::InvalidOptions(_))
        ));
        // A 64 KiB sector puts the ring at 64 KiB and needs eight sectors of ring.
        assert!(Geometry::for_device(65536 + 8 * 65536 - 1, 65536).is_err());
        assert!(Geometry::for_device(65536 + 8 * 65536, 65536).is_ok());
    }
}

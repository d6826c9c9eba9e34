//! The L2ARC ring, its persistent log, and the rebuild reader.
//!
//! # Theory
//!
//! A cache device is a ring. [`L2Device::write_batch`] appends records at the *write
//! hand*; an *evict hand* runs ahead of it, and whatever lies between the two may be
//! overwritten. Every record gets a [`LogEntryPhys`]; entries gather in an open log block
//! that is written into the ring, right after the record that filled it, every
//! `entries_per_block` entries (or earlier, see [`L2Device::commit_log`]). The device
//! header, rewritten after every batch, points at the two newest log blocks, and each
//! block points at the previous block of its chain. With two chains, each block points
//! two back, so a reader that holds block *n* already knows where *n − 2* is and can
//! read it while it decodes *n − 1* (OpenZFS's interleaved chains, seed 003).
//!
//! Positions are *ring positions*: bytes since the device was created, counting every
//! lap, so "older than" is `<` and nothing needs wrap-aware interval tests. Device
//! offset = `ring_start + pos % ring_bytes`; a record never straddles the ring end (the
//! hand skips the tail instead).
//!
//! ## Why a rebuilt log never returns overwritten bytes
//!
//! 1. Before any byte at position `p` is written, a header whose evict hand is past `p`
//!    is durable (written and flushed). A rebuild ignores everything before
//!    `evict_hand_pos - ring_bytes`, which covers every ring byte that may be rewritten
//!    from then on.
//! 2. Records and log blocks are flushed before the header that points at them is
//!    written, so a durable header never points at a block that is not durable.
//! 3. Headers alternate between two slots and carry a sequence number. A torn or lost
//!    header write leaves the previous (flushed, hence complete) header, whose evict
//!    hand already covers everything written after it (rule 1).
//! 4. Every block and entry is range-checked against the header's geometry and hands,
//!    and chained pointers must have consecutive sequence numbers and falling positions,
//!    so damage ends the walk instead of leading it astray.
//!
//! ## Why a rebuilt log never returns superseded bytes (tombstones)
//!
//! The walk goes newest to oldest and keeps the first entry it sees for each block key;
//! a [`EntryKind::Tombstone`] hides every older entry of its key. The engine appends a
//! tombstone when a cached block is overwritten and must call [`L2Device::commit_log`]
//! (which flushes) before the new bytes reach the backing store. A walk that stops early
//! (damage) returns only entries newer than the damage, and a tombstone is always newer
//! than the entries it hides, so stopping early can drop entries but never resurrect one.
//!
//! The writer keeps an explicit offset index of live records ([`L2Device::live_records`])
//! and never relies on list order to decide what the evict hand overwrote (OpenZFS issue
//! "16.0E free", reference §7 item 1).

#![warn(missing_docs)]

mod device;
mod read;
mod rebuild;

pub use device::{
    BatchOutcome, CreateOptions, EvictedRecord, IndexedRecord, L2Device, L2Stats, Placement,
    Record, forget_log, forget_log_after,
};
pub use larch_format::{ArcState, Compression, ContentType, EntryKind, LogEntryPhys};
pub use read::{CopyRef, ReadError, read_copy, read_verified, verify_copy};
pub use rebuild::{
    BlockError, HeaderRead, ProgressFn, RebuildEnd, RebuildOptions, RebuildOutcome,
    RebuildProgress, RebuildStats, RestoredEntry, Restorer, Seen, Sighting, StopReason, ValidBlock,
    WalkEnd, read_header, rebuild, rebuild_with, validate_header, walk_log,
};

use larch_format::{DevHeaderPhys, HEADER_SLOT_BYTES};
use larch_io::IoError;

/// Identity of a cached block: the volume and the block number within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// The volume's guid.
    pub volume_guid: u64,
    /// Block number within the volume.
    pub block_number: u64,
}

/// Where the ring lies on a device and how it is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Device offset of the first ring byte.
    pub ring_start: u64,
    /// Device offset one past the last ring byte.
    pub ring_end: u64,
    /// Allocation unit (power of two, at least 512).
    pub sector_bytes: u64,
}

/// The smallest ring larch accepts: sixteen full log blocks.
pub const MIN_RING_BYTES: u64 = 16 * larch_format::LOG_BLOCK_MAX_BYTES as u64;

impl Geometry {
    /// The geometry larch uses for a device of `device_bytes` with `sector_bytes`
    /// sectors: two header slots, then the ring up to the last whole sector.
    pub fn for_device(device_bytes: u64, sector_bytes: u64) -> Result<Self, L2Error> {
        let ring = larch_format::ring_span(
            device_bytes,
            sector_bytes,
            HEADER_SLOT_BYTES,
            MIN_RING_BYTES,
        )
        .map_err(L2Error::from_ring)?;
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

    /// `bytes` rounded up to a sector.
    pub fn asize(&self, bytes: u64) -> u64 {
        bytes.next_multiple_of(self.sector_bytes)
    }

    /// The first position at or after `pos` where `asize` bytes fit without crossing the
    /// ring end.
    pub fn fit(&self, pos: u64, asize: u64) -> u64 {
        larch_policy::ring::fit(self.ring_bytes(), pos, asize)
    }

    /// Device offset of header slot `slot` (0 or 1).
    pub fn header_offset(slot: u64) -> u64 {
        slot * HEADER_SLOT_BYTES
    }

    /// Whether `header`'s geometry fields equal this geometry.
    pub fn matches(&self, header: &DevHeaderPhys) -> bool {
        header.ring_start == self.ring_start
            && header.ring_end == self.ring_end
            && u64::from(header.sector_bytes) == self.sector_bytes
    }
}

/// Errors of the ring writer and of opening a device.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    /// The device failed. The writer is poisoned afterwards.
    #[error("cache device I/O: {0}")]
    Io(#[from] IoError),
    /// An earlier I/O error left the device in an unknown state; it must be reopened
    /// (which rebuilds from the last durable header) or recreated.
    #[error("cache device writer is poisoned by an earlier I/O error")]
    Poisoned,
    /// Neither header slot was ever written: the device is not formatted.
    #[error("no device header (the device is not formatted)")]
    NoHeader,
    /// A header slot holds bytes that are not a valid header (OpenZFS
    /// `l2_rebuild_dh_errors`). The device must be recreated; see [`read_header`].
    #[error("device header slot {slot} is damaged: {error}")]
    DamagedHeader {
        /// The damaged slot.
        slot: u64,
        /// Why it was refused.
        error: String,
    },
    /// A valid header that does not fit this device or pool (OpenZFS
    /// `l2_rebuild_unsupported`).
    #[error("device header does not match: {0}")]
    Unsupported(String),
    /// The device is too small for a ring.
    #[error("device of {device_bytes} bytes is smaller than the minimum {min_bytes}")]
    DeviceTooSmall {
        /// Size of the device.
        device_bytes: u64,
        /// The minimum.
        min_bytes: u64,
    },
    /// Options out of range.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// One record is larger than the ring allows (1/16 of the ring, at most 16 MiB).
    #[error("record of {bytes} bytes exceeds the limit of {max_bytes}")]
    RecordTooLarge {
        /// The record's size.
        bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// A batch spans more than a quarter of the ring; split it.
    #[error("batch spans {span_bytes} ring bytes, more than the limit of {max_bytes}")]
    BatchTooLarge {
        /// Ring bytes the batch would span.
        span_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
}

impl L2Error {
    /// A device that holds no ring: a sector size out of range is an option out of range.
    fn from_ring(err: larch_format::RingError) -> Self {
        match err {
            larch_format::RingError::BadSectorBytes { .. } => {
                L2Error::InvalidOptions(err.to_string())
            }
            larch_format::RingError::DeviceTooSmall {
                device_bytes,
                min_bytes,
            } => L2Error::DeviceTooSmall {
                device_bytes,
                min_bytes,
            },
        }
    }
}

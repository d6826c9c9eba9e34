//! On-device structures of a larch cache device: encode, decode, checksums (no I/O).
//!
//! A cache device holds a [`DevHeaderPhys`] (in two slots, see `docs/format.md`) and a
//! ring of cached records interleaved with [`LogBlockPhys`] blocks, each describing up to
//! [`LOG_BLOCK_MAX_ENTRIES`] records with [`LogEntryPhys`] entries. Blocks are reached
//! through [`LogBlockPtrPhys`] pointers: two in the header (the newest blocks) and one in
//! each block (the previous block of the same chain).
//!
//! Everything is little-endian. Every offset comes from the table in [`layout`], which
//! `docs/format.md` is tested against. Decoders take untrusted bytes and return
//! [`FormatError`]; they never panic.
//!
//! Checksums are xxh3-64 ([`checksum`]) for structures and cached bytes alike: one fast,
//! 64-bit, non-cryptographic hash. It detects media corruption and torn writes; it is
//! not meant to resist an adversary who can write the device (nothing on the device is
//! trusted for memory safety, so such an adversary can at worst make larch serve bytes
//! that carry a matching checksum, the same power a writer of the backing store has).

#![warn(missing_docs)]

mod check;
mod header;
pub mod layout;
mod log;
pub mod zil;

pub use header::{DevHeaderPhys, FLAG_FIRST_SWEEP, HEADER_MAGIC, HEADER_SLOT_BYTES, VERSION};
pub use log::{
    EncodedLogBlock, LOG_BLOCK_MAGIC, LOG_BLOCK_MAX_BYTES, LOG_BLOCK_MAX_ENTRIES, LogBlockPhys,
    LogBlockPtrPhys, LogEntryPhys, MAX_RECORD_BYTES,
};

/// Errors from decoding on-device bytes. Each names what was wrong so `larch dump` and
/// the rebuild counters can say why a structure was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The buffer is shorter than the structure.
    #[error("{what}: need {need_bytes} bytes, got {got_bytes}")]
    TooShort {
        /// The structure.
        what: &'static str,
        /// Bytes the structure needs.
        need_bytes: usize,
        /// Bytes available.
        got_bytes: usize,
    },
    /// The magic number does not match.
    #[error("{what}: bad magic {found:#018x}")]
    BadMagic {
        /// The structure.
        what: &'static str,
        /// The value found.
        found: u64,
    },
    /// The stored checksum does not match the bytes.
    #[error("{what}: checksum mismatch (stored {stored:#018x}, computed {computed:#018x})")]
    BadChecksum {
        /// The structure.
        what: &'static str,
        /// The checksum on the device.
        stored: u64,
        /// The checksum of the bytes read.
        computed: u64,
    },
    /// A format version this build does not read.
    #[error("unsupported format version {found} (this build reads {VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
    /// A field holds a value outside its domain.
    #[error("{what}.{field}: invalid value {value}")]
    BadField {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A reserved field or flag bit is not zero.
    #[error("{what}.{field}: reserved bits are not zero")]
    ReservedNotZero {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A compressed log block does not decompress to its logical size.
    #[error("log block does not decompress to {logical_bytes} bytes")]
    Decompress {
        /// The expected decompressed size.
        logical_bytes: usize,
    },
}

/// The checksum of larch's on-device structures and cached bytes: xxh3-64, seed 0.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Rounds `bytes` up to a multiple of `sector_bytes` (a power of two), or `None` on
/// overflow.
pub fn align_up(bytes: u64, sector_bytes: u64) -> Option<u64> {
    debug_assert!(sector_bytes.is_power_of_two(), "sector {sector_bytes}");
    Some(bytes.checked_add(sector_bytes - 1)? & !(sector_bytes - 1))
}

/// Why a device holds no ring (see [`ring_span`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The sector size is not one larch allocates in.
    #[error("sector_bytes {sector_bytes} is not a power of two in 512..=65536")]
    BadSectorBytes {
        /// The sector size asked for.
        sector_bytes: u64,
    },
    /// The ring would be smaller than the least the device's user accepts.
    #[error("device of {device_bytes} bytes is smaller than the minimum {min_bytes}")]
    DeviceTooSmall {
        /// Size of the device.
        device_bytes: u64,
        /// The least device that holds the smallest ring.
        min_bytes: u64,
    },
}

/// Where the ring lies on a cache or log device of `device_bytes` with `sector_bytes`
/// sectors (a power of two in 512..=65536): after the two header slots of
/// `header_slot_bytes` each, from the next sector boundary up to the last whole sector,
/// and at least `min_ring_bytes` long.
pub fn ring_span(
    device_bytes: u64,
    sector_bytes: u64,
    header_slot_bytes: u64,
    min_ring_bytes: u64,
) -> Result<std::ops::Range<u64>, RingError> {
    if !sector_bytes.is_power_of_two() || !(512..=65536).contains(&sector_bytes) {
        return Err(RingError::BadSectorBytes { sector_bytes });
    }
    let ring_start = (2 * header_slot_bytes).next_multiple_of(sector_bytes);
    let ring_end = device_bytes - device_bytes % sector_bytes;
    if ring_end < ring_start + min_ring_bytes {
        return Err(RingError::DeviceTooSmall {
            device_bytes,
            min_bytes: ring_start + min_ring_bytes,
        });
    }
    Ok(ring_start..ring_end)
}

macro_rules! u8_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $value),+
        }

        impl $name {
            /// Every value, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value for `raw`, if there is one.
            pub fn from_u8(raw: u8) -> Option<Self> {
                match raw {
                    $($value => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The stable name used by `larch dump`.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }
        }
    };
}

u8_enum! {
    /// Compression of cached bytes or of a log block.
    Compression {
        /// Stored as is.
        Off = 0,
        /// LZ4 block format (lz4_flex), no frame.
        Lz4 = 1,
    }
}

u8_enum! {
    /// What a cached block holds (OpenZFS `arc_buf_contents_t`, numbered as in its L2 log).
    ContentType {
        /// File or volume data.
        Data = 1,
        /// Metadata (for library users that tag reads).
        Metadata = 2,
    }
}

u8_enum! {
    /// The ARC state of a block when it was written to the device, numbered as OpenZFS's
    /// `arc_state_type_t` (the value is informational: restored blocks start in MRU).
    ArcState {
        /// Anonymous.
        Anon = 0,
        /// Most recently used.
        Mru = 1,
        /// MRU ghost.
        MruGhost = 2,
        /// Most frequently used.
        Mfu = 3,
        /// MFU ghost.
        MfuGhost = 4,
        /// Only on a cache device.
        L2cOnly = 5,
    }
}

u8_enum! {
    /// A log entry describes cached bytes or invalidates older entries of a block.
    EntryKind {
        /// The block's bytes are at the entry's device address.
        Data = 1,
        /// Every older entry for the same block is dead (see `docs/format.md`).
        Tombstone = 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0, 4096), Some(0));
        assert_eq!(align_up(1, 4096), Some(4096));
        assert_eq!(align_up(4096, 4096), Some(4096));
        assert_eq!(align_up(u64::MAX - 10, 4096), None);
    }

    #[test]
    fn enums_round_trip_and_reject_unknown() {
        for &c in Compression::ALL {
            assert_eq!(Compression::from_u8(c as u8), Some(c));
        }
        assert_eq!(Compression::from_u8(2), None);
        assert_eq!(ContentType::from_u8(0), None);
        assert_eq!(ArcState::from_u8(6), None);
        assert_eq!(EntryKind::from_u8(3), None);
        assert_eq!(ArcState::Mfu.name(), "Mfu");
    }
}

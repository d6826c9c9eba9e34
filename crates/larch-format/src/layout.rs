//! The one table of byte offsets of every on-device structure.
//!
//! Encoders and decoders read and write fields only through the [`FieldLayout`] constants
//! below, `docs/format.md` is tested against [`LAYOUTS`], and compile-time asserts check
//! that each structure's fields are contiguous, do not overlap, and add up to its size.

/// One field of an on-device structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field's name as `docs/format.md` spells it.
    pub name: &'static str,
    /// Byte offset from the start of the structure.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// The field's type as `docs/format.md` spells it (`u64`, `u32`, `u8`,
    /// `LogBlockPtrPhys`, `reserved`, ...).
    pub ty: &'static str,
}

/// The layout of one on-device structure.
#[derive(Clone, Copy, Debug)]
pub struct StructLayout {
    /// The structure's Rust name (ends in `Phys`).
    pub name: &'static str,
    /// Total size in bytes.
    pub size: usize,
    /// Every field, in offset order.
    pub fields: &'static [FieldLayout],
}

/// A [`FieldLayout`], for the tables.
pub(crate) const fn field(
    name: &'static str,
    offset: usize,
    size: usize,
    ty: &'static str,
) -> FieldLayout {
    FieldLayout {
        name,
        offset,
        size,
        ty,
    }
}

/// True when `fields` start at 0, follow each other without gaps or overlaps, and end at
/// `size`. Evaluated at compile time for every structure.
pub const fn is_contiguous(fields: &[FieldLayout], size: usize) -> bool {
    let mut next = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].offset != next || fields[i].size == 0 {
            return false;
        }
        next += fields[i].size;
        i += 1;
    }
    next == size
}

/// Fields of [`crate::DevHeaderPhys`].
pub mod dev_header {
    use super::{FieldLayout, field};

    /// Size of the encoded header in bytes.
    pub const SIZE: usize = 512;
    /// `LARCHL2D` in ASCII, read as a little-endian u64.
    pub const MAGIC: FieldLayout = field("magic", 0, 8, "u64");
    /// Format version.
    pub const VERSION: FieldLayout = field("version", 8, 4, "u32");
    /// Flag bits (`FIRST_SWEEP`).
    pub const FLAGS: FieldLayout = field("flags", 12, 4, "u32");
    /// Pool the device belongs to.
    pub const POOL_GUID: FieldLayout = field("pool_guid", 16, 8, "u64");
    /// This cache device.
    pub const DEVICE_GUID: FieldLayout = field("device_guid", 24, 8, "u64");
    /// First byte of the ring.
    pub const RING_START: FieldLayout = field("ring_start", 32, 8, "u64");
    /// One past the last byte of the ring.
    pub const RING_END: FieldLayout = field("ring_end", 40, 8, "u64");
    /// Allocation unit of the ring.
    pub const SECTOR_BYTES: FieldLayout = field("sector_bytes", 48, 4, "u32");
    /// Entries per full log block.
    pub const ENTRIES_PER_BLOCK: FieldLayout = field("entries_per_block", 52, 4, "u32");
    /// Write hand, as a ring position.
    pub const WRITE_HAND_POS: FieldLayout = field("write_hand_pos", 56, 8, "u64");
    /// Evict hand, as a ring position.
    pub const EVICT_HAND_POS: FieldLayout = field("evict_hand_pos", 64, 8, "u64");
    /// Live log blocks.
    pub const LOG_BLOCK_COUNT: FieldLayout = field("log_block_count", 72, 8, "u64");
    /// Aligned bytes of live log blocks.
    pub const LOG_BLOCK_BYTES: FieldLayout = field("log_block_bytes", 80, 8, "u64");
    /// Incremented on every header write; the higher of the two slots wins.
    pub const SEQUENCE: FieldLayout = field("sequence", 88, 8, "u64");
    /// 1 or 2 log chains.
    pub const CHAIN_COUNT: FieldLayout = field("chain_count", 96, 4, "u32");
    /// Zero.
    pub const RESERVED0: FieldLayout = field("reserved0", 100, 4, "reserved");
    /// The newest log block.
    pub const NEWEST0: FieldLayout = field("newest_lbp[0]", 104, 64, "LogBlockPtrPhys");
    /// The log block before the newest.
    pub const NEWEST1: FieldLayout = field("newest_lbp[1]", 168, 64, "LogBlockPtrPhys");
    /// Zero.
    pub const RESERVED1: FieldLayout = field("reserved1", 232, 272, "reserved");
    /// xxh3-64 of bytes 0..504.
    pub const CHECKSUM: FieldLayout = field("checksum", 504, 8, "u64");

    /// Every field in offset order.
    pub const FIELDS: &[FieldLayout] = &[
        MAGIC,
        VERSION,
        FLAGS,
        POOL_GUID,
        DEVICE_GUID,
        RING_START,
        RING_END,
        SECTOR_BYTES,
        ENTRIES_PER_BLOCK,
        WRITE_HAND_POS,
        EVICT_HAND_POS,
        LOG_BLOCK_COUNT,
        LOG_BLOCK_BYTES,
        SEQUENCE,
        CHAIN_COUNT,
        RESERVED0,
        NEWEST0,
        NEWEST1,
        RESERVED1,
        CHECKSUM,
    ];
}

/// Fields of [`crate::LogBlockPtrPhys`].
pub mod log_block_ptr {
    use super::{FieldLayout, field};

    /// Size of an encoded pointer in bytes.
    pub const SIZE: usize = 64;
    /// Commit sequence number of the block; 0 means "no block".
    pub const SEQUENCE: FieldLayout = field("sequence", 0, 8, "u64");
    /// Ring position of the block.
    pub const BLOCK_POS: FieldLayout = field("block_pos", 8, 8, "u64");
    /// Ring position of the first record the block describes.
    pub const PAYLOAD_START_POS: FieldLayout = field("payload_start_pos", 16, 8, "u64");
    /// Ring bytes from the payload start to the block.
    pub const PAYLOAD_BYTES: FieldLayout = field("payload_bytes", 24, 8, "u64");
    /// xxh3-64 of the block's physical bytes.
    pub const CHECKSUM: FieldLayout = field("checksum", 32, 8, "u64");
    /// Decoded (uncompressed) size of the block.
    pub const LOGICAL_SIZE: FieldLayout = field("logical_size", 40, 4, "u32");
    /// Stored size of the block before sector padding.
    pub const PHYSICAL_SIZE: FieldLayout = field("physical_size", 44, 4, "u32");
    /// Compression of the block.
    pub const COMPRESSION: FieldLayout = field("compression", 48, 1, "u8");
    /// Zero.
    pub const RESERVED: FieldLayout = field("reserved", 49, 15, "reserved");

    /// Every field in offset order.
    pub const FIELDS: &[FieldLayout] = &[
        SEQUENCE,
        BLOCK_POS,
        PAYLOAD_START_POS,
        PAYLOAD_BYTES,
        CHECKSUM,
        LOGICAL_SIZE,
        PHYSICAL_SIZE,
        COMPRESSION,
        RESERVED,
    ];
}

/// Fields of the fixed head of [`crate::LogBlockPhys`] (entries follow it).
pub mod log_block {
    use super::{FieldLayout, field};

    /// Size of the block head in bytes; entries start here.
    pub const HEAD_SIZE: usize = 128;
    /// `LARCHLOG` in ASCII, read as a little-endian u64.
    pub const MAGIC: FieldLayout = field("magic", 0, 8, "u64");
    /// Entries that follow the head.
    pub const ENTRY_COUNT: FieldLayout = field("entry_count", 8, 4, "u32");
    /// Zero.
    pub const RESERVED0: FieldLayout = field("reserved0", 12, 4, "reserved");
    /// The previous block of the same chain.
    pub const PREV_LBP: FieldLayout = field("prev_lbp", 16, 64, "LogBlockPtrPhys");
    /// Zero.
    pub const RESERVED1: FieldLayout = field("reserved1", 80, 48, "reserved");

    /// Every field of the head in offset order.
    pub const FIELDS: &[FieldLayout] = &[MAGIC, ENTRY_COUNT, RESERVED0, PREV_LBP, RESERVED1];
}

/// Fields of [`crate::LogEntryPhys`].
pub mod log_entry {
    use super::{FieldLayout, field};

    /// Size of an encoded entry in bytes.
    pub const SIZE: usize = 64;
    /// Volume the block belongs to.
    pub const VOLUME_GUID: FieldLayout = field("volume_guid", 0, 8, "u64");
    /// Block number within the volume.
    pub const BLOCK_NUMBER: FieldLayout = field("block_number", 8, 8, "u64");
    /// Generation (TXG) of the cached contents.
    pub const GENERATION: FieldLayout = field("generation", 16, 8, "u64");
    /// Device offset of the cached bytes.
    pub const DADDR: FieldLayout = field("daddr", 24, 8, "u64");
    /// xxh3-64 of the cached (physical) bytes.
    pub const DATA_CHECKSUM: FieldLayout = field("data_checksum", 32, 8, "u64");
    /// Size of the block when decompressed.
    pub const LOGICAL_SIZE: FieldLayout = field("logical_size", 40, 4, "u32");
    /// Size of the cached bytes before sector padding.
    pub const PHYSICAL_SIZE: FieldLayout = field("physical_size", 44, 4, "u32");
    /// Data entry or tombstone.
    pub const KIND: FieldLayout = field("kind", 48, 1, "u8");
    /// Compression of the cached bytes.
    pub const COMPRESSION: FieldLayout = field("compression", 49, 1, "u8");
    /// Data or metadata.
    pub const CONTENT: FieldLayout = field("content", 50, 1, "u8");
    /// ARC state when the block was written to the device.
    pub const ARC_STATE: FieldLayout = field("arc_state", 51, 1, "u8");
    /// Flag bits (`PREFETCH`).
    pub const FLAGS: FieldLayout = field("flags", 52, 1, "u8");
    /// Zero.
    pub const RESERVED: FieldLayout = field("reserved", 53, 11, "reserved");

    /// Every field in offset order.
    pub const FIELDS: &[FieldLayout] = &[
        VOLUME_GUID,
        BLOCK_NUMBER,
        GENERATION,
        DADDR,
        DATA_CHECKSUM,
        LOGICAL_SIZE,
        PHYSICAL_SIZE,
        KIND,
        COMPRESSION,
        CONTENT,
        ARC_STATE,
        FLAGS,
        RESERVED,
    ];
}

const _: () = assert!(is_contiguous(dev_header::FIELDS, dev_header::SIZE));
const _: () = assert!(is_contiguous(log_block_ptr::FIELDS, log_block_ptr::SIZE));
const _: () = assert!(is_contiguous(log_block::FIELDS, log_block::HEAD_SIZE));
const _: () = assert!(is_contiguous(log_entry::FIELDS, log_entry::SIZE));
const _: () = assert!(dev_header::NEWEST0.size == log_block_ptr::SIZE);
const _: () = assert!(log_block::PREV_LBP.size == log_block_ptr::SIZE);

/// Every structure, for `docs/format.md`'s test and for `larch dump`.
pub const LAYOUTS: &[StructLayout] = &[
    StructLayout {
        name: "DevHeaderPhys",
        size: dev_header::SIZE,
        fields: dev_header::FIELDS,
    },
    StructLayout {
        name: "LogBlockPtrPhys",
        size: log_block_ptr::SIZE,
        fields: log_block_ptr::FIELDS,
    },
    StructLayout {
        name: "LogBlockPhys",
        size: log_block::HEAD_SIZE,
        fields: log_block::FIELDS,
    },
    StructLayout {
        name: "LogEntryPhys",
        size: log_entry::SIZE,
        fields: log_entry::FIELDS,
    },
];

/// Reads a little-endian integer field of up to 8 bytes. `buf` must hold the field;
/// callers check the buffer length once before decoding.
#[inline]
pub(crate) fn get(buf: &[u8], f: FieldLayout) -> u64 {
    let mut raw = [0u8; 8];
    raw[..f.size].copy_from_slice(&buf[f.offset..f.offset + f.size]);
    u64::from_le_bytes(raw)
}

/// Writes a little-endian integer field of up to 8 bytes.
#[inline]
pub(crate) fn put(buf: &mut [u8], f: FieldLayout, value: u64) {
    debug_assert!(
        f.size == 8 || value >> (8 * f.size) == 0,
        "{} = {value} does not fit {} bytes",
        f.name,
        f.size
    );
    buf[f.offset..f.offset + f.size].copy_from_slice(&value.to_le_bytes()[..f.size]);
}

/// The bytes of a field.
#[inline]
pub(crate) fn bytes(buf: &[u8], f: FieldLayout) -> &[u8] {
    &buf[f.offset..f.offset + f.size]
}

/// The bytes of a field, mutable.
#[inline]
pub(crate) fn bytes_mut(buf: &mut [u8], f: FieldLayout) -> &mut [u8] {
    &mut buf[f.offset..f.offset + f.size]
}

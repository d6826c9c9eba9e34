//! On-device structures of a larch log device (SLOG): the intent log (ZIL).
//!
//! A log device holds a [`ZilHeaderPhys`] (mirrored into two slots) and a ring of log
//! blocks. Each block is a [`ZilBlockPhys`] head followed by a body of records, each a
//! [`ZilRecordPhys`] head followed by its data (inline, zero-padded to 8 bytes). Blocks
//! are chained: each names its sequence number, its ring position and the head checksum
//! of the block before it, so a reader can tell a block that continues the log from one
//! left over from an earlier lap. `docs/zil.md` describes the layout and the protocol;
//! its tables are tested against [`layout::LAYOUTS`].
//!
//! Everything is little-endian. Decoders take untrusted bytes, return [`FormatError`]
//! and never panic.
//!
//! One file, because the three structures share their layout table, checksum and chaining
//! rules; 290 of its lines are the round-trip and corruption tests beside them.

use crate::check::{bad, magic, prefix, reserved_zero, sealed};
use crate::layout::{FieldLayout, get, put};
use crate::{FormatError, checksum};

/// `LARCHZIL` as a little-endian u64: the log device header.
pub const ZIL_HEADER_MAGIC: u64 = u64::from_le_bytes(*b"LARCHZIL");
/// `LARCHZLB` as a little-endian u64: a log block head.
pub const ZIL_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"LARCHZLB");
/// `ZREC` as a little-endian u32: a record head.
pub const ZIL_RECORD_MAGIC: u32 = u32::from_le_bytes(*b"ZREC");
/// The log format version this build writes and reads (version log in `docs/zil.md`).
pub const ZIL_VERSION: u32 = 1;
/// Space of each of the two header slots (at offsets 0 and `ZIL_HEADER_SLOT_BYTES`), as
/// on a cache device: a slot has its own 4 KiB sector, so damage to one cannot reach the
/// other.
pub const ZIL_HEADER_SLOT_BYTES: u64 = 4096;
/// Largest body (records after the head) of one log block: 16 MiB.
pub const ZIL_BLOCK_MAX_BODY_BYTES: u32 = 16 << 20;
/// Largest data of one record: what fits in a block body beside its head.
pub const ZIL_RECORD_MAX_DATA_BYTES: u32 = ZIL_BLOCK_MAX_BODY_BYTES - layout::record::SIZE as u32;
/// Record data is zero-padded to this many bytes so every record head is 8-aligned.
pub const ZIL_RECORD_ALIGN_BYTES: usize = 8;
/// Header counters and positions are refused above this (2^62): a device would need
/// centuries to get there, and readers can then add to them without overflow.
pub const ZIL_COUNTER_MAX: u64 = 1 << 62;

/// The one table of byte offsets of the log device's structures.
pub mod layout {
    use crate::layout::{FieldLayout, StructLayout, field, is_contiguous};

    /// Fields of [`super::ZilHeaderPhys`].
    pub mod header {
        use super::{FieldLayout, field};

        /// Size of the encoded header in bytes (one 512-byte sector).
        pub const SIZE: usize = 512;
        /// `LARCHZIL` in ASCII.
        pub const MAGIC: FieldLayout = field("magic", 0, 8, "u64");
        /// Format version.
        pub const VERSION: FieldLayout = field("version", 8, 4, "u32");
        /// Flag bits (none defined: zero).
        pub const FLAGS: FieldLayout = field("flags", 12, 4, "u32");
        /// Pool the device belongs to.
        pub const POOL_GUID: FieldLayout = field("pool_guid", 16, 8, "u64");
        /// This log device.
        pub const DEVICE_GUID: FieldLayout = field("device_guid", 24, 8, "u64");
        /// Device offset of the first ring byte.
        pub const RING_START: FieldLayout = field("ring_start", 32, 8, "u64");
        /// Device offset one past the last ring byte.
        pub const RING_END: FieldLayout = field("ring_end", 40, 8, "u64");
        /// Allocation unit of the ring.
        pub const SECTOR_BYTES: FieldLayout = field("sector_bytes", 48, 4, "u32");
        /// Zero.
        pub const RESERVED0: FieldLayout = field("reserved0", 52, 4, "reserved");
        /// Header write counter.
        pub const SEQUENCE: FieldLayout = field("sequence", 56, 8, "u64");
        /// Open counter: every open writes a header with a higher epoch.
        pub const EPOCH: FieldLayout = field("epoch", 64, 8, "u64");
        /// Highest TXG the backing stores hold durably.
        pub const COMMITTED_TXG: FieldLayout = field("committed_txg", 72, 8, "u64");
        /// Ring position of the oldest live block.
        pub const TAIL_POS: FieldLayout = field("tail_pos", 80, 8, "u64");
        /// Sequence number of the block at the tail.
        pub const TAIL_SEQUENCE: FieldLayout = field("tail_sequence", 88, 8, "u64");
        /// `prev_checksum` the block at the tail must carry.
        pub const TAIL_PREV_CHECKSUM: FieldLayout = field("tail_prev_checksum", 96, 8, "u64");
        /// Zero.
        pub const RESERVED1: FieldLayout = field("reserved1", 104, 400, "reserved");
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
            RESERVED0,
            SEQUENCE,
            EPOCH,
            COMMITTED_TXG,
            TAIL_POS,
            TAIL_SEQUENCE,
            TAIL_PREV_CHECKSUM,
            RESERVED1,
            CHECKSUM,
        ];
    }

    /// Fields of [`super::ZilBlockPhys`], the head of a log block.
    pub mod block {
        use super::{FieldLayout, field};

        /// Size of the block head in bytes; the body starts here.
        pub const SIZE: usize = 128;
        /// `LARCHZLB` in ASCII.
        pub const MAGIC: FieldLayout = field("magic", 0, 8, "u64");
        /// Format version.
        pub const VERSION: FieldLayout = field("version", 8, 4, "u32");
        /// Records in the body.
        pub const RECORD_COUNT: FieldLayout = field("record_count", 12, 4, "u32");
        /// Pool of the log device.
        pub const POOL_GUID: FieldLayout = field("pool_guid", 16, 8, "u64");
        /// The log device.
        pub const DEVICE_GUID: FieldLayout = field("device_guid", 24, 8, "u64");
        /// Block sequence number (consecutive along the log).
        pub const SEQUENCE: FieldLayout = field("sequence", 32, 8, "u64");
        /// Epoch of the open that wrote the block.
        pub const EPOCH: FieldLayout = field("epoch", 40, 8, "u64");
        /// Ring position of this block.
        pub const POS: FieldLayout = field("pos", 48, 8, "u64");
        /// Head checksum of the previous block (or the header's chain seed).
        pub const PREV_CHECKSUM: FieldLayout = field("prev_checksum", 56, 8, "u64");
        /// Committed TXG known to the writer when it wrote the block.
        pub const COMMITTED_TXG: FieldLayout = field("committed_txg", 64, 8, "u64");
        /// Bytes of the body.
        pub const BODY_BYTES: FieldLayout = field("body_bytes", 72, 4, "u32");
        /// Zero.
        pub const RESERVED0: FieldLayout = field("reserved0", 76, 4, "reserved");
        /// xxh3-64 of the body.
        pub const BODY_CHECKSUM: FieldLayout = field("body_checksum", 80, 8, "u64");
        /// Zero.
        pub const RESERVED1: FieldLayout = field("reserved1", 88, 32, "reserved");
        /// xxh3-64 of head bytes 0..120.
        pub const CHECKSUM: FieldLayout = field("checksum", 120, 8, "u64");

        /// Every field in offset order.
        pub const FIELDS: &[FieldLayout] = &[
            MAGIC,
            VERSION,
            RECORD_COUNT,
            POOL_GUID,
            DEVICE_GUID,
            SEQUENCE,
            EPOCH,
            POS,
            PREV_CHECKSUM,
            COMMITTED_TXG,
            BODY_BYTES,
            RESERVED0,
            BODY_CHECKSUM,
            RESERVED1,
            CHECKSUM,
        ];
    }

    /// Fields of [`super::ZilRecordPhys`], the head of one record.
    pub mod record {
        use super::{FieldLayout, field};

        /// Size of the record head in bytes; the data starts here.
        pub const SIZE: usize = 64;
        /// `ZREC` in ASCII.
        pub const MAGIC: FieldLayout = field("magic", 0, 4, "u32");
        /// What the record does.
        pub const KIND: FieldLayout = field("kind", 4, 1, "u8");
        /// Zero.
        pub const RESERVED0: FieldLayout = field("reserved0", 5, 3, "reserved");
        /// TXG of the write.
        pub const TXG: FieldLayout = field("txg", 8, 8, "u64");
        /// Volume written.
        pub const VOLUME_ID: FieldLayout = field("volume_id", 16, 8, "u64");
        /// Byte offset in the volume.
        pub const OFFSET_BYTES: FieldLayout = field("offset_bytes", 24, 8, "u64");
        /// Data bytes that follow the head.
        pub const LENGTH: FieldLayout = field("length", 32, 4, "u32");
        /// Zero.
        pub const RESERVED1: FieldLayout = field("reserved1", 36, 4, "reserved");
        /// xxh3-64 of the data.
        pub const DATA_CHECKSUM: FieldLayout = field("data_checksum", 40, 8, "u64");
        /// Zero.
        pub const RESERVED2: FieldLayout = field("reserved2", 48, 8, "reserved");
        /// xxh3-64 of head bytes 0..56.
        pub const CHECKSUM: FieldLayout = field("checksum", 56, 8, "u64");

        /// Every field in offset order.
        pub const FIELDS: &[FieldLayout] = &[
            MAGIC,
            KIND,
            RESERVED0,
            TXG,
            VOLUME_ID,
            OFFSET_BYTES,
            LENGTH,
            RESERVED1,
            DATA_CHECKSUM,
            RESERVED2,
            CHECKSUM,
        ];
    }

    const _: () = assert!(is_contiguous(header::FIELDS, header::SIZE));
    const _: () = assert!(is_contiguous(block::FIELDS, block::SIZE));
    const _: () = assert!(is_contiguous(record::FIELDS, record::SIZE));

    /// Every log device structure, for `docs/zil.md`'s test and for `larch dump`.
    pub const LAYOUTS: &[StructLayout] = &[
        StructLayout {
            name: "ZilHeaderPhys",
            size: header::SIZE,
            fields: header::FIELDS,
        },
        StructLayout {
            name: "ZilBlockPhys",
            size: block::SIZE,
            fields: block::FIELDS,
        },
        StructLayout {
            name: "ZilRecordPhys",
            size: record::SIZE,
            fields: record::FIELDS,
        },
    ];
}

use layout::{block, header, record};

/// Checks magic, then checksum (over everything before `sum`), then version: the order
/// that tells "not this structure" from "damaged" from "newer format".
fn check_frame(
    buf: &[u8],
    what: &'static str,
    magic_field: FieldLayout,
    magic_value: u64,
    sum: FieldLayout,
    version_field: Option<FieldLayout>,
) -> Result<(), FormatError> {
    magic(buf, what, magic_field, magic_value)?;
    sealed(buf, what, sum)?;
    if let Some(f) = version_field {
        let version = get(buf, f);
        if version != u64::from(ZIL_VERSION) {
            // Not `UnsupportedVersion`: that variant names the cache device's version.
            return Err(bad(what, f.name, version));
        }
    }
    Ok(())
}

/// The log device header: identity, geometry, the committed TXG and the ring's tail.
///
/// Rewritten when the tail advances or the committed TXG changes, and at every open (to
/// raise the epoch). Each update writes the same header into slot 0, flushes, then slot
/// 1, flushes, so after an update both slots agree and one damaged slot never hides the
/// newest state. A reader takes the valid slot with the higher `sequence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZilHeaderPhys {
    /// Pool the device belongs to.
    pub pool_guid: u64,
    /// This log device, chosen by the caller at format time.
    pub device_guid: u64,
    /// Device offset of the first ring byte.
    pub ring_start: u64,
    /// Device offset one past the last ring byte.
    pub ring_end: u64,
    /// Allocation unit of the ring: a power of two in 512..=65536.
    pub sector_bytes: u32,
    /// Header write counter (both slots of one update carry the same value).
    pub sequence: u64,
    /// Open counter: blocks written after an open carry its epoch, and epochs never fall
    /// along the log.
    pub epoch: u64,
    /// Every record of a TXG ≤ this is durable in the backing stores.
    pub committed_txg: u64,
    /// Ring position of the oldest block that is not reclaimed (or of the next block to
    /// be written, when every block is reclaimed).
    pub tail_pos: u64,
    /// Sequence number of the block at `tail_pos`.
    pub tail_sequence: u64,
    /// The `prev_checksum` of the block at `tail_pos`.
    pub tail_prev_checksum: u64,
}

impl ZilHeaderPhys {
    /// Encoded size in bytes.
    pub const SIZE: usize = header::SIZE;
    const WHAT: &'static str = "ZilHeaderPhys";

    /// Encodes, computing the checksum.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        put(&mut out, header::MAGIC, ZIL_HEADER_MAGIC);
        put(&mut out, header::VERSION, u64::from(ZIL_VERSION));
        put(&mut out, header::POOL_GUID, self.pool_guid);
        put(&mut out, header::DEVICE_GUID, self.device_guid);
        put(&mut out, header::RING_START, self.ring_start);
        put(&mut out, header::RING_END, self.ring_end);
        put(&mut out, header::SECTOR_BYTES, u64::from(self.sector_bytes));
        put(&mut out, header::SEQUENCE, self.sequence);
        put(&mut out, header::EPOCH, self.epoch);
        put(&mut out, header::COMMITTED_TXG, self.committed_txg);
        put(&mut out, header::TAIL_POS, self.tail_pos);
        put(&mut out, header::TAIL_SEQUENCE, self.tail_sequence);
        put(
            &mut out,
            header::TAIL_PREV_CHECKSUM,
            self.tail_prev_checksum,
        );
        let sum = checksum(&out[..header::CHECKSUM.offset]);
        put(&mut out, header::CHECKSUM, sum);
        out
    }

    /// Decodes and checks magic, checksum, version, reserved bytes and the field domains
    /// that need no device: sector size, sector-aligned ring bounds and tail, nonzero
    /// counters no greater than [`ZIL_COUNTER_MAX`]. The caller checks the geometry
    /// against the device and the guids.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        check_frame(
            buf,
            w,
            header::MAGIC,
            ZIL_HEADER_MAGIC,
            header::CHECKSUM,
            Some(header::VERSION),
        )?;
        let flags = get(buf, header::FLAGS);
        if flags != 0 {
            return Err(FormatError::ReservedNotZero {
                what: w,
                field: "flags",
            });
        }
        reserved_zero(buf, w, header::RESERVED0)?;
        reserved_zero(buf, w, header::RESERVED1)?;
        let h = Self {
            pool_guid: get(buf, header::POOL_GUID),
            device_guid: get(buf, header::DEVICE_GUID),
            ring_start: get(buf, header::RING_START),
            ring_end: get(buf, header::RING_END),
            sector_bytes: get(buf, header::SECTOR_BYTES) as u32,
            sequence: get(buf, header::SEQUENCE),
            epoch: get(buf, header::EPOCH),
            committed_txg: get(buf, header::COMMITTED_TXG),
            tail_pos: get(buf, header::TAIL_POS),
            tail_sequence: get(buf, header::TAIL_SEQUENCE),
            tail_prev_checksum: get(buf, header::TAIL_PREV_CHECKSUM),
        };
        let sector = u64::from(h.sector_bytes);
        if !h.sector_bytes.is_power_of_two() || !(512..=65536).contains(&h.sector_bytes) {
            return Err(bad(w, "sector_bytes", sector));
        }
        if h.ring_start < 2 * ZIL_HEADER_SLOT_BYTES || !h.ring_start.is_multiple_of(sector) {
            return Err(bad(w, "ring_start", h.ring_start));
        }
        if h.ring_end <= h.ring_start || !h.ring_end.is_multiple_of(sector) {
            return Err(bad(w, "ring_end", h.ring_end));
        }
        if !h.tail_pos.is_multiple_of(sector) {
            return Err(bad(w, "tail_pos", h.tail_pos));
        }
        for (field, value) in [
            ("sequence", h.sequence),
            ("epoch", h.epoch),
            ("tail_sequence", h.tail_sequence),
        ] {
            if value == 0 || value > ZIL_COUNTER_MAX {
                return Err(bad(w, field, value));
            }
        }
        if h.tail_pos > ZIL_COUNTER_MAX {
            return Err(bad(w, "tail_pos", h.tail_pos));
        }
        if h.committed_txg > ZIL_COUNTER_MAX {
            return Err(bad(w, "committed_txg", h.committed_txg));
        }
        Ok(h)
    }
}

/// The head of one log block; `record_count` records (`body_bytes` in all) follow it.
///
/// A block is the unit of a commit: one group of records written with one write and one
/// flush. Its head is verified on its own (so `body_bytes` can be trusted before the
/// body is read), and the body by `body_checksum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZilBlockPhys {
    /// Records in the body (at least 1).
    pub record_count: u32,
    /// Pool of the log device.
    pub pool_guid: u64,
    /// The log device.
    pub device_guid: u64,
    /// Block sequence number: the block after block `n` is `n + 1`.
    pub sequence: u64,
    /// Epoch of the open that wrote the block.
    pub epoch: u64,
    /// Ring position where the block starts.
    pub pos: u64,
    /// Head checksum ([`ZilBlockPhys::head_checksum`]) of the block before this one, or
    /// the header's `tail_prev_checksum` seed for the first block after a format.
    pub prev_checksum: u64,
    /// The committed TXG the writer knew when it wrote the block.
    pub committed_txg: u64,
    /// Bytes of the body (records with their data).
    pub body_bytes: u32,
    /// xxh3-64 of the body.
    pub body_checksum: u64,
}

impl ZilBlockPhys {
    /// Encoded size of the head in bytes.
    pub const SIZE: usize = block::SIZE;
    const WHAT: &'static str = "ZilBlockPhys";

    /// Encodes, computing the head checksum.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        put(&mut out, block::MAGIC, ZIL_BLOCK_MAGIC);
        put(&mut out, block::VERSION, u64::from(ZIL_VERSION));
        put(&mut out, block::RECORD_COUNT, u64::from(self.record_count));
        put(&mut out, block::POOL_GUID, self.pool_guid);
        put(&mut out, block::DEVICE_GUID, self.device_guid);
        put(&mut out, block::SEQUENCE, self.sequence);
        put(&mut out, block::EPOCH, self.epoch);
        put(&mut out, block::POS, self.pos);
        put(&mut out, block::PREV_CHECKSUM, self.prev_checksum);
        put(&mut out, block::COMMITTED_TXG, self.committed_txg);
        put(&mut out, block::BODY_BYTES, u64::from(self.body_bytes));
        put(&mut out, block::BODY_CHECKSUM, self.body_checksum);
        let sum = checksum(&out[..block::CHECKSUM.offset]);
        put(&mut out, block::CHECKSUM, sum);
        out
    }

    /// The checksum stored in the encoded head: what the next block's `prev_checksum`
    /// names. It covers `body_checksum`, so it identifies the whole block.
    pub fn head_checksum(&self) -> u64 {
        get(&self.encode(), block::CHECKSUM)
    }

    /// Decodes and checks the head: magic, checksum, version, reserved bytes, and that
    /// the counts fit ([`ZIL_BLOCK_MAX_BODY_BYTES`], at least one record, every record
    /// head inside the body). The body is checked by [`ZilBlockPhys::verify_body`].
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        check_frame(
            buf,
            w,
            block::MAGIC,
            ZIL_BLOCK_MAGIC,
            block::CHECKSUM,
            Some(block::VERSION),
        )?;
        reserved_zero(buf, w, block::RESERVED0)?;
        reserved_zero(buf, w, block::RESERVED1)?;
        let b = Self {
            record_count: get(buf, block::RECORD_COUNT) as u32,
            pool_guid: get(buf, block::POOL_GUID),
            device_guid: get(buf, block::DEVICE_GUID),
            sequence: get(buf, block::SEQUENCE),
            epoch: get(buf, block::EPOCH),
            pos: get(buf, block::POS),
            prev_checksum: get(buf, block::PREV_CHECKSUM),
            committed_txg: get(buf, block::COMMITTED_TXG),
            body_bytes: get(buf, block::BODY_BYTES) as u32,
            body_checksum: get(buf, block::BODY_CHECKSUM),
        };
        if b.body_bytes > ZIL_BLOCK_MAX_BODY_BYTES {
            return Err(bad(w, "body_bytes", u64::from(b.body_bytes)));
        }
        let heads_bytes = u64::from(b.record_count) * record::SIZE as u64;
        if b.record_count == 0 || heads_bytes > u64::from(b.body_bytes) {
            return Err(bad(w, "record_count", u64::from(b.record_count)));
        }
        if b.sequence == 0 {
            return Err(bad(w, "sequence", 0));
        }
        if b.epoch == 0 {
            return Err(bad(w, "epoch", 0));
        }
        if b.committed_txg > ZIL_COUNTER_MAX {
            return Err(bad(w, "committed_txg", b.committed_txg));
        }
        Ok(b)
    }

    /// Checks that `body` is this block's body: its length and checksum.
    pub fn verify_body(&self, body: &[u8]) -> Result<(), FormatError> {
        let w = Self::WHAT;
        if body.len() != self.body_bytes as usize {
            return Err(bad(w, "body_bytes", body.len() as u64));
        }
        let computed = checksum(body);
        if computed != self.body_checksum {
            return Err(FormatError::BadChecksum {
                what: "ZilBlockPhys body",
                stored: self.body_checksum,
                computed,
            });
        }
        Ok(())
    }

    /// Bytes the whole block takes before padding to a sector: head and body.
    pub fn block_bytes(&self) -> u64 {
        Self::SIZE as u64 + u64::from(self.body_bytes)
    }
}

/// What a record does. Only inline writes exist; OpenZFS's indirect writes (a pointer to
/// data written elsewhere) are deliberately absent, see `docs/zil.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZilRecordKind {
    /// `length` bytes of data, inline after the head, written at `offset_bytes`.
    Write = 1,
}

impl ZilRecordKind {
    /// The kind for `raw`, if there is one.
    pub fn from_u8(raw: u8) -> Option<Self> {
        match raw {
            1 => Some(Self::Write),
            _ => None,
        }
    }
}

/// The head of one record in a block body; `length` data bytes follow it, then zero
/// padding to [`ZIL_RECORD_ALIGN_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ZilRecordPhys {
    /// What the record does.
    pub kind: ZilRecordKind,
    /// TXG the write belongs to.
    pub txg: u64,
    /// Volume written.
    pub volume_id: u64,
    /// Byte offset in the volume.
    pub offset_bytes: u64,
    /// Data bytes.
    pub length: u32,
    /// xxh3-64 of the data.
    pub data_checksum: u64,
}

impl ZilRecordPhys {
    /// Encoded size of the head in bytes.
    pub const SIZE: usize = record::SIZE;
    const WHAT: &'static str = "ZilRecordPhys";

    /// Body bytes a record with `data_bytes` of data takes: head, data, padding.
    pub fn encoded_bytes(data_bytes: usize) -> usize {
        Self::SIZE + data_bytes.next_multiple_of(ZIL_RECORD_ALIGN_BYTES)
    }

    /// Appends a write record (head, data, padding) to `out`. `data` must be at most
    /// [`ZIL_RECORD_MAX_DATA_BYTES`] long.
    pub fn append_write(
        out: &mut Vec<u8>,
        txg: u64,
        volume_id: u64,
        offset_bytes: u64,
        data: &[u8],
    ) {
        let length = u32::try_from(data.len())
            .ok()
            .filter(|&n| n <= ZIL_RECORD_MAX_DATA_BYTES)
            .unwrap_or_else(|| panic!("record of {} bytes is too large", data.len()));
        let head = Self {
            kind: ZilRecordKind::Write,
            txg,
            volume_id,
            offset_bytes,
            length,
            data_checksum: checksum(data),
        };
        out.extend_from_slice(&head.encode());
        out.extend_from_slice(data);
        let padded = data.len().next_multiple_of(ZIL_RECORD_ALIGN_BYTES);
        out.resize(out.len() + padded - data.len(), 0);
    }

    /// Encodes the head, computing its checksum.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        put(&mut out, record::MAGIC, u64::from(ZIL_RECORD_MAGIC));
        put(&mut out, record::KIND, self.kind as u64);
        put(&mut out, record::TXG, self.txg);
        put(&mut out, record::VOLUME_ID, self.volume_id);
        put(&mut out, record::OFFSET_BYTES, self.offset_bytes);
        put(&mut out, record::LENGTH, u64::from(self.length));
        put(&mut out, record::DATA_CHECKSUM, self.data_checksum);
        let sum = checksum(&out[..record::CHECKSUM.offset]);
        put(&mut out, record::CHECKSUM, sum);
        out
    }

    /// Decodes and checks a record head: magic, checksum, kind, reserved bytes, length.
    /// Records carry no version of their own: the block head's covers them.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        check_frame(
            buf,
            w,
            record::MAGIC,
            u64::from(ZIL_RECORD_MAGIC),
            record::CHECKSUM,
            None,
        )?;
        for f in [record::RESERVED0, record::RESERVED1, record::RESERVED2] {
            reserved_zero(buf, w, f)?;
        }
        let raw_kind = get(buf, record::KIND) as u8;
        let kind =
            ZilRecordKind::from_u8(raw_kind).ok_or_else(|| bad(w, "kind", u64::from(raw_kind)))?;
        let length = get(buf, record::LENGTH) as u32;
        if length > ZIL_RECORD_MAX_DATA_BYTES {
            return Err(bad(w, "length", u64::from(length)));
        }
        let txg = get(buf, record::TXG);
        if txg == 0 || txg > ZIL_COUNTER_MAX {
            return Err(bad(w, "txg", txg));
        }
        let offset_bytes = get(buf, record::OFFSET_BYTES);
        if offset_bytes > ZIL_COUNTER_MAX {
            return Err(bad(w, "offset_bytes", offset_bytes));
        }
        Ok(Self {
            kind,
            txg,
            volume_id: get(buf, record::VOLUME_ID),
            offset_bytes,
            length,
            data_checksum: get(buf, record::DATA_CHECKSUM),
        })
    }
}

/// Decodes every record of a block body: exactly `record_count` records that fill the
/// body to its last byte, each head valid, each data checksum right, padding zero.
/// Returns each record's head and data (a slice of `body`).
pub fn decode_records(
    body: &[u8],
    record_count: u32,
) -> Result<Vec<(ZilRecordPhys, &[u8])>, FormatError> {
    let w = ZilRecordPhys::WHAT;
    // Every record takes at least a head, so an absurd count fails before allocating.
    let max_records = body.len() / ZilRecordPhys::SIZE;
    if record_count as usize > max_records {
        return Err(bad("ZilBlockPhys", "record_count", u64::from(record_count)));
    }
    let mut out = Vec::with_capacity(record_count as usize);
    let mut rest = body;
    for _ in 0..record_count {
        let head = ZilRecordPhys::decode(rest)?;
        let length = head.length as usize;
        let padded = length.next_multiple_of(ZIL_RECORD_ALIGN_BYTES);
        let Some(after_head) = rest.get(ZilRecordPhys::SIZE..) else {
            return Err(bad(w, "length", u64::from(head.length)));
        };
        if after_head.len() < padded {
            return Err(bad(w, "length", u64::from(head.length)));
        }
        let (data, padding) = after_head[..padded].split_at(length);
        if padding.iter().any(|&b| b != 0) {
            return Err(FormatError::ReservedNotZero {
                what: w,
                field: "padding",
            });
        }
        let computed = checksum(data);
        if computed != head.data_checksum {
            return Err(FormatError::BadChecksum {
                what: "ZilRecordPhys data",
                stored: head.data_checksum,
                computed,
            });
        }
        out.push((head, data));
        rest = &after_head[padded..];
    }
    if !rest.is_empty() {
        return Err(bad("ZilBlockPhys", "body_bytes", body.len() as u64));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_header() -> ZilHeaderPhys {
        ZilHeaderPhys {
            pool_guid: 0x1111,
            device_guid: 0x2222,
            ring_start: 8192,
            ring_end: 1 << 20,
            sector_bytes: 4096,
            sequence: 7,
            epoch: 3,
            committed_txg: 41,
            tail_pos: 12288,
            tail_sequence: 5,
            tail_prev_checksum: 0xabcd,
        }
    }

    fn sample_block(body: &[u8], record_count: u32) -> ZilBlockPhys {
        ZilBlockPhys {
            record_count,
            pool_guid: 0x1111,
            device_guid: 0x2222,
            sequence: 9,
            epoch: 3,
            pos: 16384,
            prev_checksum: 0x55,
            committed_txg: 40,
            body_bytes: body.len() as u32,
            body_checksum: checksum(body),
        }
    }

    /// Rewrites the checksum at `sum` so a test reaches the checks behind it.
    fn reseal(buf: &mut [u8], sum: FieldLayout) {
        let value = checksum(&buf[..sum.offset]);
        put(buf, sum, value);
    }

    #[test]
    fn header_round_trips_and_refuses_damage() {
        let h = sample_header();
        let enc = h.encode();
        assert_eq!(ZilHeaderPhys::decode(&enc), Ok(h));
        assert!(matches!(
            ZilHeaderPhys::decode(&enc[..511]),
            Err(FormatError::TooShort {
                need_bytes: 512,
                got_bytes: 511,
                ..
            })
        ));

        let mut wrong_magic = enc;
        wrong_magic[0] ^= 1;
        assert!(matches!(
            ZilHeaderPhys::decode(&wrong_magic),
            Err(FormatError::BadMagic { .. })
        ));

        let mut flipped = enc;
        flipped[200] ^= 0x10;
        assert!(matches!(
            ZilHeaderPhys::decode(&flipped),
            Err(FormatError::BadChecksum { .. })
        ));

        let mut v2 = enc;
        put(&mut v2, header::VERSION, 2);
        reseal(&mut v2, header::CHECKSUM);
        assert_eq!(
            ZilHeaderPhys::decode(&v2),
            Err(FormatError::BadField {
                what: "ZilHeaderPhys",
                field: "version",
                value: 2
            })
        );

        let mut flags = enc;
        put(&mut flags, header::FLAGS, 1);
        reseal(&mut flags, header::CHECKSUM);
        assert!(matches!(
            ZilHeaderPhys::decode(&flags),
            Err(FormatError::ReservedNotZero { field: "flags", .. })
        ));

        let mut reserved = enc;
        reserved[300] = 1;
        reseal(&mut reserved, header::CHECKSUM);
        assert!(matches!(
            ZilHeaderPhys::decode(&reserved),
            Err(FormatError::ReservedNotZero {
                field: "reserved1",
                ..
            })
        ));
    }

    #[test]
    fn header_refuses_fields_out_of_domain() {
        type Damage = fn(&mut ZilHeaderPhys);
        let cases: [(&str, Damage); 9] = [
            ("sector_bytes", |h| h.sector_bytes = 1000),
            ("sector_bytes", |h| h.sector_bytes = 256),
            ("ring_start", |h| h.ring_start = 4096),
            ("ring_end", |h| h.ring_end = h.ring_start),
            ("tail_pos", |h| h.tail_pos = 100),
            ("epoch", |h| h.epoch = 0),
            ("tail_sequence", |h| h.tail_sequence = 0),
            ("sequence", |h| h.sequence = ZIL_COUNTER_MAX + 1),
            ("tail_pos", |h| h.tail_pos = u64::MAX - 4095),
        ];
        for (field, damage) in cases {
            let mut h = sample_header();
            damage(&mut h);
            match ZilHeaderPhys::decode(&h.encode()) {
                Err(FormatError::BadField { field: f, .. }) => assert_eq!(f, field, "{h:?}"),
                other => panic!("{field}: expected BadField, got {other:?}"),
            }
        }
    }

    fn body_with(records: &[(u64, u64, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(txg, vol, off, data) in records {
            ZilRecordPhys::append_write(&mut body, txg, vol, off, data);
        }
        body
    }

    #[test]
    fn block_and_records_round_trip() {
        let body = body_with(&[
            (5, 1, 4096, b"hello"),
            (6, 2, 0, b""),
            (6, 1, 512, &[7; 513]),
        ]);
        assert_eq!(body.len(), 64 + 8 + 64 + 64 + 520);
        let b = sample_block(&body, 3);
        let enc = b.encode();
        let decoded = ZilBlockPhys::decode(&enc).unwrap();
        assert_eq!(decoded, b);
        assert_eq!(decoded.head_checksum(), get(&enc, block::CHECKSUM));
        decoded.verify_body(&body).unwrap();
        let records = decode_records(&body, 3).unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!((records[0].0.txg, records[0].1), (5, &b"hello"[..]));
        assert_eq!((records[1].0.length, records[1].1.len()), (0, 0));
        assert_eq!(
            (records[2].0.offset_bytes, records[2].1),
            (512, &[7u8; 513][..])
        );
    }

    #[test]
    fn block_head_refusals() {
        let body = body_with(&[(5, 1, 0, b"x")]);
        let enc = sample_block(&body, 1).encode();
        let mut m = enc;
        m[3] ^= 4;
        assert!(matches!(
            ZilBlockPhys::decode(&m),
            Err(FormatError::BadMagic { .. })
        ));
        let mut c = enc;
        c[64] ^= 4;
        assert!(matches!(
            ZilBlockPhys::decode(&c),
            Err(FormatError::BadChecksum { .. })
        ));
        let mut v = enc;
        put(&mut v, block::VERSION, 9);
        reseal(&mut v, block::CHECKSUM);
        assert!(matches!(
            ZilBlockPhys::decode(&v),
            Err(FormatError::BadField {
                field: "version",
                value: 9,
                ..
            })
        ));
        let mut r = enc;
        r[100] = 1;
        reseal(&mut r, block::CHECKSUM);
        assert!(matches!(
            ZilBlockPhys::decode(&r),
            Err(FormatError::ReservedNotZero {
                field: "reserved1",
                ..
            })
        ));
        for (count, body_bytes) in [(0u32, 72u32), (2, 72), (1, ZIL_BLOCK_MAX_BODY_BYTES + 8)] {
            let mut b = sample_block(&body, count);
            b.body_bytes = body_bytes;
            assert!(
                matches!(
                    ZilBlockPhys::decode(&b.encode()),
                    Err(FormatError::BadField { .. })
                ),
                "count {count} body {body_bytes}"
            );
        }
        let b = sample_block(&body, 1);
        assert!(b.verify_body(&body[..body.len() - 8]).is_err());
        let mut torn = body.clone();
        torn[70] ^= 1;
        assert!(matches!(
            b.verify_body(&torn),
            Err(FormatError::BadChecksum { .. })
        ));
    }

    #[test]
    fn record_refusals() {
        let body = body_with(&[(5, 1, 0, b"abc")]);
        assert_eq!(decode_records(&body, 1).unwrap().len(), 1);
        // Wrong counts and lengths never read past the body.
        assert!(decode_records(&body, 2).is_err());
        assert!(decode_records(&body, u32::MAX).is_err());
        assert!(decode_records(&body[..70], 1).is_err());
        let mut extra = body.clone();
        extra.extend_from_slice(&[0; 8]);
        assert!(decode_records(&extra, 1).is_err(), "trailing bytes");

        let mut data = body.clone();
        data[64] ^= 1;
        assert!(matches!(
            decode_records(&data, 1),
            Err(FormatError::BadChecksum { .. })
        ));
        let mut pad = body.clone();
        pad[70] = 9;
        assert!(matches!(
            decode_records(&pad, 1),
            Err(FormatError::ReservedNotZero {
                field: "padding",
                ..
            })
        ));
        let mut kind = body.clone();
        put(&mut kind, record::KIND, 7);
        reseal(&mut kind, record::CHECKSUM);
        assert!(matches!(
            decode_records(&kind, 1),
            Err(FormatError::BadField {
                field: "kind",
                value: 7,
                ..
            })
        ));
        let mut length = body.clone();
        put(&mut length, record::LENGTH, u64::from(u32::MAX));
        reseal(&mut length, record::CHECKSUM);
        assert!(matches!(
            decode_records(&length, 1),
            Err(FormatError::BadField {
                field: "length",
                ..
            })
        ));
        let mut magic = body;
        magic[0] ^= 1;
        assert!(matches!(
            decode_records(&magic, 1),
            Err(FormatError::BadMagic { .. })
        ));
    }

    #[test]
    fn decoders_never_panic_on_short_or_random_input() {
        let mut state = 0x1234_5678_u64;
        for len in 0..700 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 33) as u8
                })
                .collect();
            let _ = ZilHeaderPhys::decode(&buf);
            let _ = ZilBlockPhys::decode(&buf);
            let _ = ZilRecordPhys::decode(&buf);
            let _ = decode_records(&buf, (len % 5) as u32);
        }
    }
}

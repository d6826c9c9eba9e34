//! Log entries, log block pointers and log blocks.

use crate::check::{bad, magic, prefix, reserved_zero, too_short};
use crate::layout::{bytes, bytes_mut, get, log_block, log_block_ptr, log_entry, put};
use crate::{ArcState, Compression, ContentType, EntryKind, FormatError, align_up, checksum};

/// Most entries one log block holds (as in OpenZFS: a 128-byte head plus 1022 × 64 bytes
/// is 64 KiB).
pub const LOG_BLOCK_MAX_ENTRIES: usize = 1022;
/// Largest decoded log block in bytes.
pub const LOG_BLOCK_MAX_BYTES: usize =
    log_block::HEAD_SIZE + LOG_BLOCK_MAX_ENTRIES * log_entry::SIZE;
/// Largest cached record in bytes (16 MiB, OpenZFS's `SPA_MAXBLOCKSIZE`).
pub const MAX_RECORD_BYTES: u32 = 16 << 20;
/// `LARCHLOG` as a little-endian u64.
pub const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"LARCHLOG");

const _: () = assert!(LOG_BLOCK_MAX_BYTES == 65536);
const _: () = assert!(log_entry::SIZE == 64 && log_block_ptr::SIZE == 64);

const FLAG_PREFETCH: u8 = 1;

/// One log entry: a cached record, or a tombstone that kills older entries of a block.
///
/// Tombstones carry only `volume_guid`, `block_number` and `generation`; every other
/// field is zero (or the default enum value) and the decoder insists on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogEntryPhys {
    /// Data or tombstone.
    pub kind: EntryKind,
    /// Volume the block belongs to.
    pub volume_guid: u64,
    /// Block number within the volume (offset / volblocksize).
    pub block_number: u64,
    /// Generation (TXG) of the cached contents; for a tombstone, the generation that
    /// superseded them.
    pub generation: u64,
    /// Device offset of the cached bytes.
    pub daddr: u64,
    /// xxh3-64 of the `physical_size` cached bytes.
    pub data_checksum: u64,
    /// Size of the block when decompressed.
    pub logical_size: u32,
    /// Size of the cached bytes (before padding to a sector).
    pub physical_size: u32,
    /// Compression of the cached bytes.
    pub compression: Compression,
    /// Data or metadata.
    pub content: ContentType,
    /// ARC state when written (OpenZFS numbering).
    pub arc_state: ArcState,
    /// The block was read by a prefetch.
    pub prefetch: bool,
}

impl LogEntryPhys {
    /// Encoded size in bytes.
    pub const SIZE: usize = log_entry::SIZE;
    const WHAT: &'static str = "LogEntryPhys";

    /// A tombstone for `(volume_guid, block_number)` at `generation`.
    pub fn tombstone(volume_guid: u64, block_number: u64, generation: u64) -> Self {
        Self {
            kind: EntryKind::Tombstone,
            volume_guid,
            block_number,
            generation,
            daddr: 0,
            data_checksum: 0,
            logical_size: 0,
            physical_size: 0,
            compression: Compression::Off,
            content: ContentType::Data,
            arc_state: ArcState::Anon,
            prefetch: false,
        }
    }

    /// Encodes into `out` (at least [`Self::SIZE`] bytes).
    pub fn encode_into(&self, out: &mut [u8]) {
        let out = &mut out[..Self::SIZE];
        put(out, log_entry::VOLUME_GUID, self.volume_guid);
        put(out, log_entry::BLOCK_NUMBER, self.block_number);
        put(out, log_entry::GENERATION, self.generation);
        put(out, log_entry::DADDR, self.daddr);
        put(out, log_entry::DATA_CHECKSUM, self.data_checksum);
        put(out, log_entry::LOGICAL_SIZE, u64::from(self.logical_size));
        put(out, log_entry::PHYSICAL_SIZE, u64::from(self.physical_size));
        put(out, log_entry::KIND, self.kind as u64);
        put(out, log_entry::COMPRESSION, self.compression as u64);
        put(out, log_entry::CONTENT, self.content as u64);
        put(out, log_entry::ARC_STATE, self.arc_state as u64);
        put(
            out,
            log_entry::FLAGS,
            if self.prefetch {
                u64::from(FLAG_PREFETCH)
            } else {
                0
            },
        );
        bytes_mut(out, log_entry::RESERVED).fill(0);
    }

    /// Encodes into a new array.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        self.encode_into(&mut out);
        out
    }

    /// Decodes and checks the field domains. Range checks against a device's geometry
    /// belong to the reader, which knows the geometry.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        let raw_u8 = |f| get(buf, f) as u8;
        let kind = EntryKind::from_u8(raw_u8(log_entry::KIND))
            .ok_or_else(|| bad(w, "kind", get(buf, log_entry::KIND)))?;
        let compression = Compression::from_u8(raw_u8(log_entry::COMPRESSION))
            .ok_or_else(|| bad(w, "compression", get(buf, log_entry::COMPRESSION)))?;
        let content = ContentType::from_u8(raw_u8(log_entry::CONTENT))
            .ok_or_else(|| bad(w, "content", get(buf, log_entry::CONTENT)))?;
        let arc_state = ArcState::from_u8(raw_u8(log_entry::ARC_STATE))
            .ok_or_else(|| bad(w, "arc_state", get(buf, log_entry::ARC_STATE)))?;
        let flags = raw_u8(log_entry::FLAGS);
        if flags & !FLAG_PREFETCH != 0 {
            return Err(FormatError::ReservedNotZero {
                what: w,
                field: "flags",
            });
        }
        reserved_zero(buf, w, log_entry::RESERVED)?;
        let entry = Self {
            kind,
            volume_guid: get(buf, log_entry::VOLUME_GUID),
            block_number: get(buf, log_entry::BLOCK_NUMBER),
            generation: get(buf, log_entry::GENERATION),
            daddr: get(buf, log_entry::DADDR),
            data_checksum: get(buf, log_entry::DATA_CHECKSUM),
            logical_size: get(buf, log_entry::LOGICAL_SIZE) as u32,
            physical_size: get(buf, log_entry::PHYSICAL_SIZE) as u32,
            compression,
            content,
            arc_state,
            prefetch: flags & FLAG_PREFETCH != 0,
        };
        entry.check()?;
        Ok(entry)
    }

    /// Checks the relations between fields that every valid entry satisfies.
    pub fn check(&self) -> Result<(), FormatError> {
        let w = Self::WHAT;
        match self.kind {
            EntryKind::Tombstone => {
                if *self != Self::tombstone(self.volume_guid, self.block_number, self.generation) {
                    return Err(FormatError::ReservedNotZero {
                        what: w,
                        field: "tombstone fields",
                    });
                }
            }
            EntryKind::Data => {
                if self.physical_size == 0 || self.physical_size > MAX_RECORD_BYTES {
                    return Err(bad(w, "physical_size", u64::from(self.physical_size)));
                }
                if self.logical_size == 0 || self.logical_size > MAX_RECORD_BYTES {
                    return Err(bad(w, "logical_size", u64::from(self.logical_size)));
                }
                if self.compression == Compression::Off && self.logical_size != self.physical_size {
                    return Err(bad(w, "logical_size", u64::from(self.logical_size)));
                }
            }
        }
        Ok(())
    }
}

/// A pointer to a log block: where it is, what it covers, how to verify and decode it.
///
/// Positions are *ring positions*: bytes written to the ring since the device was
/// created, counting every lap. The device offset of ring position `p` is
/// `ring_start + p % (ring_end - ring_start)`. Positions only grow, which makes every
/// "is this before that" question free of wrap-around arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBlockPtrPhys {
    /// Commit sequence number (1 for the first block of a device); 0 = no block.
    pub sequence: u64,
    /// Ring position of the block.
    pub block_pos: u64,
    /// Ring position of the first record the block describes.
    pub payload_start_pos: u64,
    /// `block_pos - payload_start_pos`: the ring bytes the block's records span.
    pub payload_bytes: u64,
    /// xxh3-64 of the block's `physical_size` stored bytes.
    pub checksum: u64,
    /// Size of the decoded block.
    pub logical_size: u32,
    /// Size of the stored block before sector padding.
    pub physical_size: u32,
    /// How the block is stored.
    pub compression: Compression,
}

impl LogBlockPtrPhys {
    /// Encoded size in bytes.
    pub const SIZE: usize = log_block_ptr::SIZE;
    const WHAT: &'static str = "LogBlockPtrPhys";

    /// The null pointer ("no block").
    pub const NULL: Self = Self {
        sequence: 0,
        block_pos: 0,
        payload_start_pos: 0,
        payload_bytes: 0,
        checksum: 0,
        logical_size: 0,
        physical_size: 0,
        compression: Compression::Off,
    };

    /// Whether this is the null pointer.
    pub fn is_null(&self) -> bool {
        self.sequence == 0
    }

    /// Bytes the block occupies on the ring (its stored size rounded up to a sector).
    pub fn asize(&self, sector_bytes: u64) -> u64 {
        align_up(u64::from(self.physical_size), sector_bytes).unwrap_or(u64::MAX)
    }

    /// Encodes into `out` (at least [`Self::SIZE`] bytes).
    pub fn encode_into(&self, out: &mut [u8]) {
        let out = &mut out[..Self::SIZE];
        put(out, log_block_ptr::SEQUENCE, self.sequence);
        put(out, log_block_ptr::BLOCK_POS, self.block_pos);
        put(
            out,
            log_block_ptr::PAYLOAD_START_POS,
            self.payload_start_pos,
        );
        put(out, log_block_ptr::PAYLOAD_BYTES, self.payload_bytes);
        put(out, log_block_ptr::CHECKSUM, self.checksum);
        put(
            out,
            log_block_ptr::LOGICAL_SIZE,
            u64::from(self.logical_size),
        );
        put(
            out,
            log_block_ptr::PHYSICAL_SIZE,
            u64::from(self.physical_size),
        );
        put(out, log_block_ptr::COMPRESSION, self.compression as u64);
        bytes_mut(out, log_block_ptr::RESERVED).fill(0);
    }

    /// Encodes into a new array.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        self.encode_into(&mut out);
        out
    }

    /// Decodes and checks the field domains (sizes, compression, the null form).
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        reserved_zero(buf, w, log_block_ptr::RESERVED)?;
        let raw_compression = get(buf, log_block_ptr::COMPRESSION);
        let compression = Compression::from_u8(raw_compression as u8)
            .ok_or_else(|| bad(w, "compression", raw_compression))?;
        let ptr = Self {
            sequence: get(buf, log_block_ptr::SEQUENCE),
            block_pos: get(buf, log_block_ptr::BLOCK_POS),
            payload_start_pos: get(buf, log_block_ptr::PAYLOAD_START_POS),
            payload_bytes: get(buf, log_block_ptr::PAYLOAD_BYTES),
            checksum: get(buf, log_block_ptr::CHECKSUM),
            logical_size: get(buf, log_block_ptr::LOGICAL_SIZE) as u32,
            physical_size: get(buf, log_block_ptr::PHYSICAL_SIZE) as u32,
            compression,
        };
        ptr.check()?;
        Ok(ptr)
    }

    /// Checks the relations between fields that every valid pointer satisfies.
    pub fn check(&self) -> Result<(), FormatError> {
        let w = Self::WHAT;
        if self.is_null() {
            if *self != Self::NULL {
                return Err(FormatError::ReservedNotZero {
                    what: w,
                    field: "null pointer",
                });
            }
            return Ok(());
        }
        let logical = self.logical_size as usize;
        if !(log_block::HEAD_SIZE..=LOG_BLOCK_MAX_BYTES).contains(&logical)
            || !(logical - log_block::HEAD_SIZE).is_multiple_of(log_entry::SIZE)
        {
            return Err(bad(w, "logical_size", u64::from(self.logical_size)));
        }
        let physical_ok = match self.compression {
            Compression::Off => self.physical_size == self.logical_size,
            Compression::Lz4 => self.physical_size > 0 && self.physical_size < self.logical_size,
        };
        if !physical_ok {
            return Err(bad(w, "physical_size", u64::from(self.physical_size)));
        }
        if self.block_pos.checked_sub(self.payload_start_pos) != Some(self.payload_bytes) {
            return Err(bad(w, "payload_bytes", self.payload_bytes));
        }
        Ok(())
    }
}

/// A decoded log block: the previous block of its chain and its entries, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBlockPhys {
    /// The previous block of the same chain (null for the first blocks of a device).
    pub prev: LogBlockPtrPhys,
    /// The entries in the order they were appended.
    pub entries: Vec<LogEntryPhys>,
}

/// A log block as it goes on the device: the stored bytes, padded to a sector, and the
/// pointer fields that describe them (the caller fills in positions and sequence).
#[derive(Clone, Debug)]
pub struct EncodedLogBlock {
    /// The stored bytes, zero-padded to a multiple of the sector size.
    pub bytes: Vec<u8>,
    /// Bytes before padding.
    pub physical_size: u32,
    /// Decoded size.
    pub logical_size: u32,
    /// How it is stored.
    pub compression: Compression,
    /// xxh3-64 of `bytes[..physical_size]`.
    pub checksum: u64,
}

impl LogBlockPhys {
    const WHAT: &'static str = "LogBlockPhys";

    /// Decoded size of a block with `entries` entries.
    pub fn logical_size(entries: usize) -> usize {
        log_block::HEAD_SIZE + entries * log_entry::SIZE
    }

    /// Encodes the decoded (logical) form.
    pub fn encode_logical(&self) -> Vec<u8> {
        assert!(
            self.entries.len() <= LOG_BLOCK_MAX_ENTRIES,
            "log block with {} entries",
            self.entries.len()
        );
        let mut out = vec![0u8; Self::logical_size(self.entries.len())];
        put(&mut out, log_block::MAGIC, LOG_BLOCK_MAGIC);
        put(&mut out, log_block::ENTRY_COUNT, self.entries.len() as u64);
        self.prev
            .encode_into(bytes_mut(&mut out, log_block::PREV_LBP));
        let body = &mut out[log_block::HEAD_SIZE..];
        for (entry, slot) in self
            .entries
            .iter()
            .zip(body.chunks_exact_mut(log_entry::SIZE))
        {
            entry.encode_into(slot);
        }
        out
    }

    /// Decodes the logical form; `buf` must be exactly the block.
    pub fn decode_logical(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        too_short(w, log_block::HEAD_SIZE, buf.len())?;
        magic(buf, w, log_block::MAGIC, LOG_BLOCK_MAGIC)?;
        let count = get(buf, log_block::ENTRY_COUNT);
        if count > LOG_BLOCK_MAX_ENTRIES as u64 || Self::logical_size(count as usize) != buf.len() {
            return Err(bad(w, "entry_count", count));
        }
        reserved_zero(buf, w, log_block::RESERVED0)?;
        reserved_zero(buf, w, log_block::RESERVED1)?;
        let prev = LogBlockPtrPhys::decode(bytes(buf, log_block::PREV_LBP))?;
        let entries = buf[log_block::HEAD_SIZE..]
            .chunks_exact(log_entry::SIZE)
            .map(LogEntryPhys::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { prev, entries })
    }

    /// Encodes for the device: LZ4-compressed when that saves at least one sector,
    /// zero-padded to `sector_bytes`, checksummed.
    pub fn encode_physical(&self, sector_bytes: u64) -> EncodedLogBlock {
        let logical = self.encode_logical();
        let raw_asize = align_up(logical.len() as u64, sector_bytes).expect("small") as usize;
        let compressed = lz4_flex::block::compress(&logical);
        let lz4_asize = align_up(compressed.len() as u64, sector_bytes).expect("small") as usize;
        let (mut stored, compression) = if lz4_asize < raw_asize && compressed.len() < logical.len()
        {
            (compressed, Compression::Lz4)
        } else {
            (logical.clone(), Compression::Off)
        };
        let physical_size = stored.len() as u32;
        let checksum = checksum(&stored);
        stored.resize(
            if compression == Compression::Lz4 {
                lz4_asize
            } else {
                raw_asize
            },
            0,
        );
        EncodedLogBlock {
            bytes: stored,
            physical_size,
            logical_size: logical.len() as u32,
            compression,
            checksum,
        }
    }

    /// Verifies and decodes stored bytes described by `ptr` (`stored` holds at least
    /// `ptr.physical_size` bytes; padding after it is ignored).
    pub fn decode_physical(stored: &[u8], ptr: &LogBlockPtrPhys) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        ptr.check()?;
        if ptr.is_null() {
            return Err(bad(w, "pointer", 0));
        }
        let physical = ptr.physical_size as usize;
        let stored = prefix(w, stored, physical)?;
        let computed = checksum(stored);
        if computed != ptr.checksum {
            return Err(FormatError::BadChecksum {
                what: w,
                stored: ptr.checksum,
                computed,
            });
        }
        match ptr.compression {
            Compression::Off => Self::decode_logical(stored),
            Compression::Lz4 => {
                let logical_bytes = ptr.logical_size as usize;
                let mut out = vec![0u8; logical_bytes];
                match lz4_flex::block::decompress_into(stored, &mut out) {
                    Ok(n) if n == logical_bytes => Self::decode_logical(&out),
                    _ => Err(FormatError::Decompress { logical_bytes }),
                }
            }
        }
    }
}

impl Default for LogBlockPtrPhys {
    fn default() -> Self {
        Self::NULL
    }
}

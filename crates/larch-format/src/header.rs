//! The device header.

use crate::check::{bad, magic, prefix, reserved_zero, sealed};
use crate::layout::{bytes, bytes_mut, dev_header, get, put};
use crate::{FormatError, LogBlockPtrPhys, checksum};

/// `LARCHL2D` as a little-endian u64.
pub const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"LARCHL2D");
/// The format version this build writes and reads (see the version log in
/// `docs/format.md`).
pub const VERSION: u32 = 1;
/// Space reserved for each of the two header slots (at offsets 0 and
/// `HEADER_SLOT_BYTES`). 4 KiB keeps a slot in its own sector on 4K-sector devices, so
/// tearing the write of one slot can never damage the other.
pub const HEADER_SLOT_BYTES: u64 = 4096;
/// Header flag: the write hand has not yet wrapped (no record was ever overwritten).
pub const FLAG_FIRST_SWEEP: u32 = 1;

/// The device header: identity, geometry, hands, and the two newest log blocks.
///
/// Written after every batch, alternately into two slots; a reader takes the valid slot
/// with the higher `sequence`. Hands are ring positions (see [`LogBlockPtrPhys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevHeaderPhys {
    /// Format version.
    pub version: u32,
    /// Flag bits ([`FLAG_FIRST_SWEEP`]).
    pub flags: u32,
    /// Pool the device belongs to.
    pub pool_guid: u64,
    /// This cache device.
    pub device_guid: u64,
    /// Device offset of the first ring byte.
    pub ring_start: u64,
    /// Device offset one past the last ring byte.
    pub ring_end: u64,
    /// Allocation unit of the ring (power of two).
    pub sector_bytes: u32,
    /// Entries per full log block (1..=1022).
    pub entries_per_block: u32,
    /// Where the writer resumes (ring position).
    pub write_hand_pos: u64,
    /// Evict hand (ring position): the ring bytes in `[write_hand_pos, evict_hand_pos)`
    /// may have been overwritten, and no valid record lies before
    /// `evict_hand_pos - ring size`.
    pub evict_hand_pos: u64,
    /// Live log blocks the writer knew of.
    pub log_block_count: u64,
    /// Aligned bytes of those blocks.
    pub log_block_bytes: u64,
    /// Header write counter; the slot with the higher value is newer.
    pub sequence: u64,
    /// 1 (each block points at the one before) or 2 (each block points two back, so a
    /// reader can fetch one block ahead).
    pub chain_count: u32,
    /// The newest log block (`[0]`) and the one before it (`[1]`).
    pub newest: [LogBlockPtrPhys; 2],
}

impl DevHeaderPhys {
    /// Encoded size in bytes.
    pub const SIZE: usize = dev_header::SIZE;
    const WHAT: &'static str = "DevHeaderPhys";

    /// The slot (0 or 1) this header is written to: they alternate with `sequence`.
    pub fn slot(&self) -> u64 {
        self.sequence % 2
    }

    /// Whether the first-sweep flag is set.
    pub fn first_sweep(&self) -> bool {
        self.flags & FLAG_FIRST_SWEEP != 0
    }

    /// Encodes, computing the checksum.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        put(&mut out, dev_header::MAGIC, HEADER_MAGIC);
        put(&mut out, dev_header::VERSION, u64::from(self.version));
        put(&mut out, dev_header::FLAGS, u64::from(self.flags));
        put(&mut out, dev_header::POOL_GUID, self.pool_guid);
        put(&mut out, dev_header::DEVICE_GUID, self.device_guid);
        put(&mut out, dev_header::RING_START, self.ring_start);
        put(&mut out, dev_header::RING_END, self.ring_end);
        put(
            &mut out,
            dev_header::SECTOR_BYTES,
            u64::from(self.sector_bytes),
        );
        put(
            &mut out,
            dev_header::ENTRIES_PER_BLOCK,
            u64::from(self.entries_per_block),
        );
        put(&mut out, dev_header::WRITE_HAND_POS, self.write_hand_pos);
        put(&mut out, dev_header::EVICT_HAND_POS, self.evict_hand_pos);
        put(&mut out, dev_header::LOG_BLOCK_COUNT, self.log_block_count);
        put(&mut out, dev_header::LOG_BLOCK_BYTES, self.log_block_bytes);
        put(&mut out, dev_header::SEQUENCE, self.sequence);
        put(
            &mut out,
            dev_header::CHAIN_COUNT,
            u64::from(self.chain_count),
        );
        self.newest[0].encode_into(bytes_mut(&mut out, dev_header::NEWEST0));
        self.newest[1].encode_into(bytes_mut(&mut out, dev_header::NEWEST1));
        let sum = checksum(&out[..dev_header::CHECKSUM.offset]);
        put(&mut out, dev_header::CHECKSUM, sum);
        out
    }

    /// Decodes and verifies magic, checksum, version and field domains. Geometry is
    /// checked against the actual device by the reader.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let w = Self::WHAT;
        let buf = prefix(w, buf, Self::SIZE)?;
        magic(buf, w, dev_header::MAGIC, HEADER_MAGIC)?;
        sealed(buf, w, dev_header::CHECKSUM)?;
        let version = get(buf, dev_header::VERSION) as u32;
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion { found: version });
        }
        let flags = get(buf, dev_header::FLAGS) as u32;
        if flags & !FLAG_FIRST_SWEEP != 0 {
            return Err(FormatError::ReservedNotZero {
                what: w,
                field: "flags",
            });
        }
        reserved_zero(buf, w, dev_header::RESERVED0)?;
        reserved_zero(buf, w, dev_header::RESERVED1)?;
        let header = Self {
            version,
            flags,
            pool_guid: get(buf, dev_header::POOL_GUID),
            device_guid: get(buf, dev_header::DEVICE_GUID),
            ring_start: get(buf, dev_header::RING_START),
            ring_end: get(buf, dev_header::RING_END),
            sector_bytes: get(buf, dev_header::SECTOR_BYTES) as u32,
            entries_per_block: get(buf, dev_header::ENTRIES_PER_BLOCK) as u32,
            write_hand_pos: get(buf, dev_header::WRITE_HAND_POS),
            evict_hand_pos: get(buf, dev_header::EVICT_HAND_POS),
            log_block_count: get(buf, dev_header::LOG_BLOCK_COUNT),
            log_block_bytes: get(buf, dev_header::LOG_BLOCK_BYTES),
            sequence: get(buf, dev_header::SEQUENCE),
            chain_count: get(buf, dev_header::CHAIN_COUNT) as u32,
            newest: [
                LogBlockPtrPhys::decode(bytes(buf, dev_header::NEWEST0))?,
                LogBlockPtrPhys::decode(bytes(buf, dev_header::NEWEST1))?,
            ],
        };
        let bad = |field, value| bad(w, field, value);
        if !(1..=2).contains(&header.chain_count) {
            return Err(bad("chain_count", u64::from(header.chain_count)));
        }
        if header.entries_per_block == 0
            || header.entries_per_block as usize > crate::LOG_BLOCK_MAX_ENTRIES
        {
            return Err(bad(
                "entries_per_block",
                u64::from(header.entries_per_block),
            ));
        }
        if !header.sector_bytes.is_power_of_two() || header.sector_bytes < 512 {
            return Err(bad("sector_bytes", u64::from(header.sector_bytes)));
        }
        Ok(header)
    }
}

//! Reading a log device: the two header slots, and the chain of blocks from the tail.
//!
//! Everything here treats the device as untrusted: lengths are bounded by the geometry
//! before anything is allocated, counters are checked before they are incremented, and a
//! block that does not verify ends the walk instead of failing it. Only an I/O error
//! fails a walk, because ending it there could silently drop acknowledged records.

use larch_format::zil::{
    ZIL_COUNTER_MAX, ZIL_HEADER_MAGIC, ZilBlockPhys, ZilHeaderPhys, decode_records,
};
use larch_format::{FormatError, HEADER_MAGIC};
use larch_io::BlockDevice;

use crate::{Geometry, LogError, Record, slot_offset};

/// What a header slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlotContent {
    /// Zeros: never written.
    Empty,
    /// A larch cache device header.
    CacheHeader,
    /// Something that is not a larch header (its first eight bytes).
    Foreign(u64),
    /// A valid log header.
    Header(ZilHeaderPhys),
    /// A log header that does not decode.
    Damaged(FormatError),
}

/// Reads and classifies both header slots.
pub(crate) fn read_slots<D: BlockDevice>(dev: &D) -> Result<[SlotContent; 2], LogError> {
    let mut out = [SlotContent::Empty, SlotContent::Empty];
    for (slot, content) in out.iter_mut().enumerate() {
        let mut raw = [0u8; ZilHeaderPhys::SIZE];
        dev.read_at(&mut raw, slot_offset(slot as u64))?;
        *content = classify(&raw);
    }
    Ok(out)
}

fn classify(raw: &[u8; ZilHeaderPhys::SIZE]) -> SlotContent {
    if raw.iter().all(|&b| b == 0) {
        return SlotContent::Empty;
    }
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&raw[..8]);
    match u64::from_le_bytes(magic) {
        HEADER_MAGIC => SlotContent::CacheHeader,
        ZIL_HEADER_MAGIC => match ZilHeaderPhys::decode(raw) {
            Ok(header) => SlotContent::Header(header),
            Err(err) => SlotContent::Damaged(err),
        },
        other => SlotContent::Foreign(other),
    }
}

/// The header a reader uses, and how many slots were damaged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChosenHeader {
    pub header: ZilHeaderPhys,
    pub slot: usize,
    pub damaged_slots: u32,
}

/// Chooses the header from the two slots, or says why the device is refused. The pool
/// is not checked here (`larch dump` reads any pool's device).
///
/// Both slots hold the same header after every completed update (see
/// `LogDevice::write_header`), so one damaged slot never hides newer state: the valid
/// slot is either as new, or the update that damaged the other never returned.
pub(crate) fn choose_header(slots: &[SlotContent; 2]) -> Result<ChosenHeader, LogError> {
    if slots.contains(&SlotContent::CacheHeader) {
        return Err(LogError::CacheDevice);
    }
    if slots.iter().all(|s| *s == SlotContent::Empty) {
        return Err(LogError::Unformatted);
    }
    let is_log = |s: &SlotContent| matches!(s, SlotContent::Header(_) | SlotContent::Damaged(_));
    if !slots.iter().any(is_log) {
        let found = slots
            .iter()
            .find_map(|s| match s {
                SlotContent::Foreign(magic) => Some(*magic),
                _ => None,
            })
            .unwrap_or(0);
        return Err(LogError::NotALogDevice { found });
    }
    for s in slots {
        // A slot whose checksum holds but whose version is unknown was written by
        // another build: refuse rather than guess which slot is newer.
        if let SlotContent::Damaged(FormatError::BadField {
            what: "ZilHeaderPhys",
            field: "version",
            value,
        }) = s
        {
            return Err(LogError::UnsupportedVersion { found: *value });
        }
    }
    let valid: Vec<(usize, ZilHeaderPhys)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            SlotContent::Header(h) => Some((i, *h)),
            _ => None,
        })
        .collect();
    let damaged_slots = slots
        .iter()
        .filter(|s| matches!(s, SlotContent::Damaged(_) | SlotContent::Foreign(_)))
        .count() as u32;
    match valid.as_slice() {
        [] => Err(LogError::DamagedHeader {
            slot0: describe_slot(&slots[0]),
            slot1: describe_slot(&slots[1]),
        }),
        [(slot, header)] => Ok(ChosenHeader {
            header: *header,
            slot: *slot,
            damaged_slots,
        }),
        [(_, a), (_, b), ..] => {
            let same_device = a.pool_guid == b.pool_guid
                && a.device_guid == b.device_guid
                && a.ring_start == b.ring_start
                && a.ring_end == b.ring_end
                && a.sector_bytes == b.sector_bytes;
            if !same_device {
                return Err(LogError::InconsistentHeader(format!(
                    "slot 0 names pool {:#x} device {:#x} ring [{}, {}) sector {}, \
                     slot 1 names pool {:#x} device {:#x} ring [{}, {}) sector {}",
                    a.pool_guid,
                    a.device_guid,
                    a.ring_start,
                    a.ring_end,
                    a.sector_bytes,
                    b.pool_guid,
                    b.device_guid,
                    b.ring_start,
                    b.ring_end,
                    b.sector_bytes
                )));
            }
            let (slot, header) = if b.sequence > a.sequence {
                (1, *b)
            } else {
                (0, *a)
            };
            Ok(ChosenHeader {
                header,
                slot,
                damaged_slots,
            })
        }
    }
}

pub(crate) fn describe_slot(s: &SlotContent) -> String {
    match s {
        SlotContent::Empty => "empty".into(),
        SlotContent::CacheHeader => "a cache device header".into(),
        SlotContent::Foreign(magic) => format!("not a larch header (magic {magic:#018x})"),
        SlotContent::Header(h) => format!("valid, sequence {}", h.sequence),
        SlotContent::Damaged(err) => err.to_string(),
    }
}

/// Counters a writer resumes from must leave it room to count: half the decodable range.
pub(crate) const RESUMABLE_COUNTER_MAX: u64 = ZIL_COUNTER_MAX / 2;

/// Refuses a header whose counters a writer could not continue from. `open` refuses such
/// a header, and no header that would fail here is ever written, so every header the log
/// writes can be opened again.
pub(crate) fn check_counters(header: &ZilHeaderPhys) -> Result<(), LogError> {
    for (field, value) in [
        ("sequence", header.sequence),
        ("epoch", header.epoch),
        ("tail_sequence", header.tail_sequence),
        ("tail_pos", header.tail_pos),
    ] {
        if value > RESUMABLE_COUNTER_MAX {
            return Err(LogError::CounterExhausted { field, value });
        }
    }
    Ok(())
}

/// The geometry the header describes, if it is the one the device has, and counters a
/// writer can continue from.
pub(crate) fn check_geometry(
    header: &ZilHeaderPhys,
    device_bytes: u64,
) -> Result<Geometry, LogError> {
    check_counters(header)?;
    let sector = u64::from(header.sector_bytes);
    let expected = Geometry::for_device(device_bytes, sector)
        .map_err(|err| LogError::Geometry(format!("header sector size {sector}: {err}")))?;
    if expected.ring_start != header.ring_start || expected.ring_end != header.ring_end {
        return Err(LogError::Geometry(format!(
            "header says ring [{}, {}), a device of {device_bytes} bytes with {sector}-byte \
             sectors has [{}, {})",
            header.ring_start, header.ring_end, expected.ring_start, expected.ring_end
        )));
    }
    Ok(expected)
}

/// Why a replay ended: what was at the position after the last block it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayEnd {
    /// Nothing that looks like a log block: zeros or other bytes (the usual end).
    NoBlock,
    /// A valid log block that does not continue the log: written in an earlier lap, left
    /// over by a run that crashed, or written by another log. `reason` names the field
    /// that differed.
    Stale {
        /// The block's sequence number.
        sequence: u64,
        /// `"guid"`, `"position"`, `"sequence"`, `"prev_checksum"`, `"epoch"`,
        /// `"committed_txg"` or `"size"`.
        reason: &'static str,
    },
    /// A block that fails its checks: a torn write (the newest block only) or media
    /// damage. Nothing after it is returned.
    Damaged(FormatError),
    /// The log fills the whole ring.
    RingFull,
}

impl std::fmt::Display for ReplayEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayEnd::NoBlock => write!(f, "no block at the next position"),
            ReplayEnd::Stale { sequence, reason } => {
                write!(
                    f,
                    "block {sequence} does not continue the log ({reason} differs)"
                )
            }
            ReplayEnd::Damaged(err) => write!(f, "damaged block: {err}"),
            ReplayEnd::RingFull => write!(f, "the log fills the ring"),
        }
    }
}

/// One block of the chain, verified.
pub(crate) struct WalkedBlock {
    pub head: ZilBlockPhys,
    pub asize: u64,
    pub records: Vec<Record>,
}

impl WalkedBlock {
    pub fn max_txg(&self) -> u64 {
        self.records.iter().map(|r| r.txg).max().unwrap_or(0)
    }
}

/// The chain from the tail, and why it ended.
pub(crate) struct Walk {
    pub blocks: Vec<WalkedBlock>,
    pub end: ReplayEnd,
}

/// What replay found at open: the committed TXG and every newer record, in log order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// Every record of a TXG ≤ this is in the backing stores (the header's value, or a
    /// higher one stamped into a block after it).
    pub committed_txg: u64,
    /// Records of TXGs newer than `committed_txg`, in the order they were appended,
    /// bytes as committed. The engine applies them in this order.
    pub records: Vec<Record>,
    /// Blocks the walk verified, from the tail.
    pub blocks: u64,
    /// Records in those blocks that were skipped as already committed.
    pub records_skipped: u64,
    /// Why the walk stopped.
    pub end: ReplayEnd,
    /// Header slots that held a damaged header (0 or 1; with 2 the device is refused).
    pub damaged_header_slots: u32,
}

impl Replay {
    /// The highest TXG among the replayed records: the engine's next TXG must be newer.
    pub fn max_txg(&self) -> Option<u64> {
        self.records.iter().map(|r| r.txg).max()
    }
}

/// Walks the chain from the header's tail (see the crate's theory for the rule).
pub(crate) fn walk<D: BlockDevice>(
    dev: &D,
    g: &Geometry,
    header: &ZilHeaderPhys,
) -> Result<Walk, LogError> {
    let limit = header.tail_pos.saturating_add(g.ring_bytes());
    let max_block_bytes = ZilBlockPhys::SIZE as u64 + g.max_body_bytes();
    let mut blocks = Vec::new();
    let mut pos = header.tail_pos;
    let mut sequence = header.tail_sequence;
    let mut prev_checksum = header.tail_prev_checksum;
    let mut min_epoch = 1;
    let mut min_committed_txg = 0;
    let end = loop {
        if pos >= limit {
            break ReplayEnd::RingFull;
        }
        let mut raw = [0u8; ZilBlockPhys::SIZE];
        // The head never wraps: blocks start on sectors and a sector holds a head.
        dev.read_at(&mut raw, g.daddr(pos))?;
        let head = match ZilBlockPhys::decode(&raw) {
            Ok(head) => head,
            Err(FormatError::BadMagic { .. }) => break ReplayEnd::NoBlock,
            Err(err) => break ReplayEnd::Damaged(err),
        };
        let stale = |reason| ReplayEnd::Stale {
            sequence: head.sequence,
            reason,
        };
        if head.pool_guid != header.pool_guid || head.device_guid != header.device_guid {
            break stale("guid");
        }
        if head.pos != pos {
            break stale("position");
        }
        if head.sequence != sequence {
            break stale("sequence");
        }
        if head.prev_checksum != prev_checksum {
            break stale("prev_checksum");
        }
        if head.epoch < min_epoch || head.epoch > header.epoch {
            break stale("epoch");
        }
        // A writer's committed TXG never falls, so neither do the stamps along the log.
        if head.committed_txg < min_committed_txg {
            break stale("committed_txg");
        }
        let asize = g.asize(head.block_bytes());
        if head.block_bytes() > max_block_bytes || pos.saturating_add(asize) > limit {
            break stale("size");
        }
        let mut body = vec![0u8; head.body_bytes as usize];
        read_ring(dev, g, pos + ZilBlockPhys::SIZE as u64, &mut body)?;
        if let Err(err) = head.verify_body(&body) {
            break ReplayEnd::Damaged(err);
        }
        let records = match decode_records(&body, head.record_count) {
            Ok(records) => records
                .into_iter()
                .map(|(r, data)| Record {
                    txg: r.txg,
                    volume_id: r.volume_id,
                    offset_bytes: r.offset_bytes,
                    data: data.to_vec(),
                })
                .collect(),
            Err(err) => break ReplayEnd::Damaged(err),
        };
        blocks.push(WalkedBlock {
            head,
            asize,
            records,
        });
        pos += asize;
        prev_checksum = head.head_checksum();
        min_epoch = head.epoch;
        min_committed_txg = head.committed_txg;
        // Header decoding bounds every counter well below u64::MAX, so this cannot
        // overflow before the ring limit ends the walk.
        sequence += 1;
    };
    Ok(Walk { blocks, end })
}

/// Reads `buf.len()` ring bytes at `pos`, in two pieces when they wrap.
pub(crate) fn read_ring<D: BlockDevice>(
    dev: &D,
    g: &Geometry,
    pos: u64,
    buf: &mut [u8],
) -> Result<(), LogError> {
    let mut done = 0usize;
    for (offset, len) in g.pieces(pos, buf.len() as u64) {
        if len == 0 {
            continue;
        }
        let len = len as usize;
        dev.read_at(&mut buf[done..done + len], offset)?;
        done += len;
    }
    Ok(())
}

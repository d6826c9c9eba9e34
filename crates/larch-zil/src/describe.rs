//! A read-only look at a log device, for `larch dump` (the `zdb -lll` of a log device).

use std::fmt;

use larch_format::zil::ZilHeaderPhys;
use larch_io::BlockDevice;

use crate::LogError;
use crate::walk::{self, ReplayEnd, SlotContent};

/// What a header slot holds, as `larch dump` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never written (zeros).
    Empty,
    /// A larch cache device header.
    CacheHeader,
    /// Bytes that are not a larch header.
    Foreign {
        /// The first eight bytes as a little-endian u64.
        magic: u64,
    },
    /// A valid log header.
    Valid(ZilHeaderPhys),
    /// A log header that does not decode.
    Damaged(String),
}

/// One block of the chain from the tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSummary {
    /// Block sequence number.
    pub sequence: u64,
    /// Ring position.
    pub pos: u64,
    /// Device offset of the head.
    pub daddr: u64,
    /// Ring bytes the block takes.
    pub asize: u64,
    /// Epoch of the open that wrote it.
    pub epoch: u64,
    /// Committed TXG its writer knew.
    pub committed_txg: u64,
    /// Records in it.
    pub records: u32,
    /// Their data bytes.
    pub data_bytes: u64,
    /// Lowest and highest TXG of its records.
    pub txg_range: (u64, u64),
}

/// A log device as found on the media, without changing it.
#[derive(Clone, Debug)]
pub struct LogDescription {
    /// Size of the device.
    pub device_bytes: u64,
    /// Both header slots.
    pub slots: [SlotState; 2],
    /// The header a reader would use and its slot, if one is usable.
    pub header: Option<(usize, ZilHeaderPhys)>,
    /// Why `LogDevice::open` would refuse the device (besides a pool mismatch).
    pub refusal: Option<String>,
    /// The chain from the tail (empty when refused).
    pub blocks: Vec<BlockSummary>,
    /// Why the chain ended.
    pub end: Option<ReplayEnd>,
    /// The committed TXG replay would use.
    pub committed_txg: u64,
    /// Records replay would return (TXG above the committed one).
    pub records_to_replay: u64,
}

/// Reads a log device's headers and chain without writing anything. Fails only on I/O
/// errors; every refusal is reported in the description.
pub fn describe<D: BlockDevice>(dev: &D) -> Result<LogDescription, LogError> {
    let raw = walk::read_slots(dev)?;
    let slots = raw.clone().map(|s| match s {
        SlotContent::Empty => SlotState::Empty,
        SlotContent::CacheHeader => SlotState::CacheHeader,
        SlotContent::Foreign(magic) => SlotState::Foreign { magic },
        SlotContent::Header(h) => SlotState::Valid(h),
        SlotContent::Damaged(err) => SlotState::Damaged(err.to_string()),
    });
    let mut out = LogDescription {
        device_bytes: dev.len_bytes(),
        slots,
        header: None,
        refusal: None,
        blocks: Vec::new(),
        end: None,
        committed_txg: 0,
        records_to_replay: 0,
    };
    let chosen = match walk::choose_header(&raw) {
        Ok(chosen) => chosen,
        Err(err) => {
            out.refusal = Some(err.to_string());
            return Ok(out);
        }
    };
    out.header = Some((chosen.slot, chosen.header));
    let geometry = match walk::check_geometry(&chosen.header, out.device_bytes) {
        Ok(g) => g,
        Err(err) => {
            out.refusal = Some(err.to_string());
            return Ok(out);
        }
    };
    let walked = walk::walk(dev, &geometry, &chosen.header)?;
    out.committed_txg = walked
        .blocks
        .last()
        .map_or(0, |b| b.head.committed_txg)
        .max(chosen.header.committed_txg);
    for block in &walked.blocks {
        let txgs = block.records.iter().map(|r| r.txg);
        out.records_to_replay += block
            .records
            .iter()
            .filter(|r| r.txg > out.committed_txg)
            .count() as u64;
        out.blocks.push(BlockSummary {
            sequence: block.head.sequence,
            pos: block.head.pos,
            daddr: geometry.daddr(block.head.pos),
            asize: block.asize,
            epoch: block.head.epoch,
            committed_txg: block.head.committed_txg,
            records: block.head.record_count,
            data_bytes: block.records.iter().map(|r| r.data.len() as u64).sum(),
            txg_range: (txgs.clone().min().unwrap_or(0), txgs.max().unwrap_or(0)),
        });
    }
    out.end = Some(walked.end);
    Ok(out)
}

impl fmt::Display for LogDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "larch log device, {} bytes", self.device_bytes)?;
        for (i, slot) in self.slots.iter().enumerate() {
            match slot {
                SlotState::Empty => writeln!(f, "  header slot {i}: empty")?,
                SlotState::CacheHeader => writeln!(f, "  header slot {i}: a cache device header")?,
                SlotState::Foreign { magic } => writeln!(
                    f,
                    "  header slot {i}: not a larch header (magic {magic:#018x})"
                )?,
                SlotState::Valid(h) => writeln!(
                    f,
                    "  header slot {i}: valid, sequence {}, epoch {}, committed_txg {}",
                    h.sequence, h.epoch, h.committed_txg
                )?,
                SlotState::Damaged(why) => writeln!(f, "  header slot {i}: DAMAGED: {why}")?,
            }
        }
        if let Some((slot, h)) = &self.header {
            writeln!(f, "header (slot {slot}):")?;
            writeln!(f, "  pool_guid          {:#018x}", h.pool_guid)?;
            writeln!(f, "  device_guid        {:#018x}", h.device_guid)?;
            writeln!(
                f,
                "  ring               [{}, {}) = {} bytes, sector_bytes {}",
                h.ring_start,
                h.ring_end,
                h.ring_end - h.ring_start,
                h.sector_bytes
            )?;
            writeln!(f, "  sequence           {}", h.sequence)?;
            writeln!(f, "  epoch              {}", h.epoch)?;
            writeln!(f, "  committed_txg      {}", h.committed_txg)?;
            writeln!(
                f,
                "  tail               pos {}, sequence {}, prev_checksum {:#018x}",
                h.tail_pos, h.tail_sequence, h.tail_prev_checksum
            )?;
        }
        if let Some(why) = &self.refusal {
            writeln!(f, "REFUSED: {why}")?;
            return Ok(());
        }
        let used: u64 = self.blocks.iter().map(|b| b.asize).sum();
        writeln!(
            f,
            "chain: {} blocks, {} ring bytes; committed_txg {}; {} records to replay",
            self.blocks.len(),
            used,
            self.committed_txg,
            self.records_to_replay
        )?;
        for b in &self.blocks {
            writeln!(
                f,
                "  block {:>8} pos {:>12} daddr {:>12} asize {:>8} epoch {:>4} records {:>5} \
                 data {:>9} txg {}..={} stamp {}",
                b.sequence,
                b.pos,
                b.daddr,
                b.asize,
                b.epoch,
                b.records,
                b.data_bytes,
                b.txg_range.0,
                b.txg_range.1,
                b.committed_txg
            )?;
        }
        if let Some(end) = &self.end {
            writeln!(f, "end: {end}")?;
        }
        Ok(())
    }
}

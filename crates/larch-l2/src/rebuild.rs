//! Reading a device back: the header, the log walk, and the rebuild.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::mpsc;

use larch_format::{
    DevHeaderPhys, EntryKind, FormatError, HEADER_SLOT_BYTES, LogBlockPhys, LogBlockPtrPhys,
    LogEntryPhys,
};
use larch_io::{AlignedBuf, BlockDevice, IoError};

use crate::{BlockKey, Geometry, L2Error};

/// The header a reader chose, and what the other slot held.
#[derive(Clone, Debug)]
pub struct HeaderRead {
    /// The valid header with the higher sequence.
    pub header: DevHeaderPhys,
    /// The slot it came from (0 or 1).
    pub slot: u64,
    /// The other slot's (older) header, if it was ever written.
    pub other: Option<DevHeaderPhys>,
}

/// Reads both header slots and returns the newer valid one.
///
/// A slot whose first sector is all zeros was never written (or was cleared by
/// [`crate::L2Device::create`]) and is ignored. A slot that holds anything else but does
/// not decode is damaged media: the header is sector-atomic (`docs/format.md`, media
/// assumptions), so a crash can lose a header write but never leave half of one. Falling
/// back to the other slot could then skip a durable tombstone, so a damaged slot refuses
/// the whole device ([`L2Error::DamagedHeader`]) and the cache starts cold.
pub fn read_header(dev: &dyn BlockDevice) -> Result<HeaderRead, L2Error> {
    let mut buf = AlignedBuf::zeroed(2 * HEADER_SLOT_BYTES as usize);
    dev.read_at(&mut buf, 0)?;
    let decode = |slot: u64| {
        let at = (slot * HEADER_SLOT_BYTES) as usize;
        let bytes = &buf[at..at + HEADER_SLOT_BYTES as usize];
        if bytes[..DevHeaderPhys::SIZE].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let header = DevHeaderPhys::decode(bytes)?;
        // A header copied into the wrong slot is not one this writer produced.
        if header.slot() != slot {
            return Err(FormatError::BadField {
                what: "DevHeaderPhys",
                field: "sequence",
                value: header.sequence,
            });
        }
        Ok(Some(header))
    };
    let mut slots = Vec::with_capacity(2);
    for slot in 0..2 {
        match decode(slot) {
            Ok(header) => slots.push(header),
            Err(error) => {
                return Err(L2Error::DamagedHeader {
                    slot,
                    error: error.to_string(),
                });
            }
        }
    }
    let (h0, h1) = (slots[0], slots[1]);
    let pick = match (h0, h1) {
        (Some(a), Some(b)) if a.sequence >= b.sequence => (a, 0, h1),
        (Some(_), Some(b)) => (b, 1, h0),
        (Some(a), None) => (a, 0, None),
        (None, Some(b)) => (b, 1, None),
        (None, None) => return Err(L2Error::NoHeader),
    };
    Ok(HeaderRead {
        header: pick.0,
        slot: pick.1,
        other: pick.2,
    })
}

/// The largest hand position a header may hold (see [`validate_header`]).
const MAX_HAND_POS: u64 = 1 << 62;

/// Checks a decoded header against the device it was read from (and the expected pool
/// and device guids), returning the ring geometry. Failure means the header cannot be
/// used (OpenZFS `l2_rebuild_unsupported`).
pub fn validate_header(
    header: &DevHeaderPhys,
    device_bytes: u64,
    expect: Option<(u64, u64)>,
) -> Result<Geometry, L2Error> {
    let unsupported = |why: String| Err(L2Error::Unsupported(why));
    let geo = match Geometry::for_device(device_bytes, u64::from(header.sector_bytes)) {
        Ok(geo) => geo,
        Err(e) => return unsupported(e.to_string()),
    };
    if !geo.matches(header) {
        return unsupported(format!(
            "ring {}..{} (sector {}) does not match this device's {}..{}",
            header.ring_start, header.ring_end, header.sector_bytes, geo.ring_start, geo.ring_end
        ));
    }
    if let Some((pool, device)) = expect
        && (header.pool_guid, header.device_guid) != (pool, device)
    {
        return unsupported(format!(
            "guids {:#x}/{:#x} are not the expected {pool:#x}/{device:#x}",
            header.pool_guid, header.device_guid
        ));
    }
    let ring = geo.ring_bytes();
    let (write, evict) = (header.write_hand_pos, header.evict_hand_pos);
    if write > evict || evict - write > ring / 2 {
        return unsupported(format!(
            "hands write {write} evict {evict} are inconsistent"
        ));
    }
    // Hand positions count every byte ever written to the ring: 2^62 is centuries of
    // writing at any device's speed. Above it, position arithmetic could overflow.
    if evict > MAX_HAND_POS {
        return unsupported(format!("evict hand {evict} is beyond any real device's"));
    }
    if header.first_sweep() != (evict <= ring) {
        return unsupported(format!(
            "first-sweep flag {} disagrees with evict hand {evict}",
            header.first_sweep()
        ));
    }
    let newest = &header.newest;
    if newest[0].is_null() && !newest[1].is_null() {
        return unsupported("newest_lbp[0] is null but newest_lbp[1] is not".into());
    }
    Ok(geo)
}

/// Why one log block was refused.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// Reading it failed (`l2_rebuild_io_errors`).
    #[error("read failed: {0}")]
    Io(#[from] IoError),
    /// Its checksum did not match (`l2_rebuild_cksum_lb_errors`).
    #[error("{0}")]
    Checksum(FormatError),
    /// It did not decode (bad magic, bad field, bad compression).
    #[error("{0}")]
    Decode(FormatError),
    /// The pointer to it does not fit the geometry, the hands or the chain.
    #[error("bad pointer: {0}")]
    BadPointer(String),
    /// One of its entries lies outside the ring or outside the block's payload.
    #[error("entry {index}: {reason}")]
    BadEntry {
        /// Index of the entry in the block.
        index: usize,
        /// What was wrong.
        reason: String,
    },
}

/// How a walk ended.
#[derive(Debug)]
pub enum StopReason {
    /// The chain ended (the device's first blocks, or no blocks at all).
    ChainEnd,
    /// The next block lies behind the evict hand (its space may be overwritten).
    EvictHand,
    /// A structure was refused; nothing from it or older was used.
    Invalid {
        /// The pointer that led to it.
        ptr: LogBlockPtrPhys,
        /// Why.
        error: BlockError,
    },
    /// The entry limit (`RebuildOptions::max_entries`) was reached (`l2_rebuild_lowmem`).
    EntryLimit,
    /// The progress callback asked to stop.
    Cancelled,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::ChainEnd => f.write_str("the end of the log"),
            StopReason::EvictHand => f.write_str("the evict hand"),
            StopReason::Invalid { ptr, error } => write!(
                f,
                "log block {} at ring byte {} refused: {error}",
                ptr.sequence, ptr.block_pos
            ),
            StopReason::EntryLimit => f.write_str("the entry limit"),
            StopReason::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl StopReason {
    /// Whether the walk reached the natural end of the log.
    pub fn is_clean(&self) -> bool {
        matches!(self, StopReason::ChainEnd | StopReason::EvictHand)
    }
}

/// A log block that passed every check, with its entries' ring positions.
#[derive(Debug)]
pub struct ValidBlock {
    /// The pointer it was reached by.
    pub ptr: LogBlockPtrPhys,
    /// The decoded block.
    pub block: LogBlockPhys,
    /// Ring position of each entry's record (`None` for tombstones).
    pub entry_pos: Vec<Option<u64>>,
}

/// The result of [`walk_log`].
#[derive(Debug)]
pub struct WalkEnd {
    /// Why the walk stopped.
    pub reason: StopReason,
    /// Blocks that passed every check.
    pub blocks_valid: u64,
    /// Their aligned bytes.
    pub bytes_valid: u64,
}

/// Walks the log from the header's newest block towards the evict hand, verifying each
/// block (pointer, checksum, magic, entries) before handing it to `visit`, newest first.
/// Stops at the first structure that fails a check.
///
/// With `prefetch` and two chains, two helper threads each follow one chain (read,
/// verify, decode, check the entries, then follow `prev_lbp`), so two block reads are in
/// flight while `visit` runs; the walk still accepts blocks strictly in sequence order
/// and checks each pointer against the walk so far itself. With one chain the next address is only known after the current
/// block is decoded, so reads cannot overlap: that is what the interleaved chains buy.
pub fn walk_log(
    dev: &dyn BlockDevice,
    header: &DevHeaderPhys,
    prefetch: bool,
    visit: &mut dyn FnMut(ValidBlock) -> ControlFlow<()>,
) -> WalkEnd {
    // The walk's arithmetic relies on a sane geometry; `validate_header` checks it, but
    // this is a public entry point, so refuse rather than trust the caller.
    let sector = u64::from(header.sector_bytes);
    if header.ring_end <= header.ring_start || !sector.is_power_of_two() || sector < 512 {
        return WalkEnd {
            reason: StopReason::Invalid {
                ptr: header.newest[0],
                error: BlockError::BadPointer("header geometry is invalid".into()),
            },
            blocks_valid: 0,
            bytes_valid: 0,
        };
    }
    let walker = Walker::new(header);
    if prefetch && header.chain_count == 2 {
        std::thread::scope(|scope| {
            // A bound of two blocks per chain keeps the read-ahead (and the memory it
            // holds) small, and lets a stopped walk end its helpers promptly.
            let (tx0, rx0) = mpsc::sync_channel(2);
            let (tx1, rx1) = mpsc::sync_channel(2);
            let w = &walker;
            scope.spawn(move || w.follow_chain(dev, header.newest[0], tx0));
            scope.spawn(move || w.follow_chain(dev, header.newest[1], tx1));
            walker.merge(visit, [rx0, rx1])
        })
    } else {
        walker.run_sequential(dev, visit)
    }
}

/// What a chain follower hands to the walk.
enum ChainMsg {
    /// A block it read and checked (or failed to).
    Block(LogBlockPtrPhys, Result<Checked, BlockError>),
    /// The chain ended here.
    End(StopReason),
}

/// A decoded block whose entries passed [`Walker::check_block`], with their positions.
type Checked = (LogBlockPhys, Vec<Option<u64>>);

struct Walker {
    geo: Geometry,
    header: DevHeaderPhys,
    /// Ring positions below this may have been overwritten.
    floor_pos: u64,
}

/// The walk's position: what the next accepted block must satisfy.
struct Cursor {
    expected_seq: u64,
    /// Blocks must end at or before this: the write hand, then each accepted block's
    /// start, so positions strictly fall along the walk.
    limit_pos: u64,
}

impl Walker {
    fn new(header: &DevHeaderPhys) -> Self {
        let geo = Geometry {
            ring_start: header.ring_start,
            ring_end: header.ring_end,
            sector_bytes: u64::from(header.sector_bytes),
        };
        let floor_pos = header.evict_hand_pos.saturating_sub(geo.ring_bytes());
        Self {
            geo,
            header: *header,
            floor_pos,
        }
    }

    fn cursor(&self) -> Cursor {
        Cursor {
            expected_seq: self.header.newest[0].sequence,
            limit_pos: self.header.write_hand_pos,
        }
    }

    /// Where a chain ends before reading `ptr`, if it does.
    fn chain_end(&self, ptr: &LogBlockPtrPhys) -> Option<StopReason> {
        if ptr.is_null() {
            Some(StopReason::ChainEnd)
        } else if ptr.block_pos < self.floor_pos {
            Some(StopReason::EvictHand)
        } else {
            None
        }
    }

    /// Checks a block read for `ptr` in walk order (its pointer against the walk so far;
    /// its contents were checked by [`Walker::read_checked`]), advancing the cursor when
    /// it is accepted.
    fn accept(
        &self,
        cursor: &mut Cursor,
        ptr: LogBlockPtrPhys,
        result: Result<Checked, BlockError>,
    ) -> Result<ValidBlock, StopReason> {
        let invalid = |error| StopReason::Invalid { ptr, error };
        self.check_ptr(&ptr, cursor.expected_seq, cursor.limit_pos)
            .map_err(|why| invalid(BlockError::BadPointer(why)))?;
        let (block, entry_pos) = result.map_err(invalid)?;
        cursor.expected_seq = ptr.sequence - 1;
        cursor.limit_pos = ptr.block_pos;
        Ok(ValidBlock {
            ptr,
            block,
            entry_pos,
        })
    }

    /// Hands an accepted block to `visit` and counts it.
    fn deliver(
        &self,
        end: &mut WalkEnd,
        valid: ValidBlock,
        visit: &mut dyn FnMut(ValidBlock) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        end.blocks_valid += 1;
        end.bytes_valid += valid.ptr.asize(self.geo.sector_bytes);
        visit(valid)
    }

    /// One block at a time, in walk order.
    fn run_sequential(
        &self,
        dev: &dyn BlockDevice,
        visit: &mut dyn FnMut(ValidBlock) -> ControlFlow<()>,
    ) -> WalkEnd {
        let two_chains = self.header.chain_count == 2;
        let mut end = WalkEnd {
            reason: StopReason::ChainEnd,
            blocks_valid: 0,
            bytes_valid: 0,
        };
        let mut cursor = self.cursor();
        let mut cur = self.header.newest[0];
        let mut next = if two_chains {
            self.header.newest[1]
        } else {
            LogBlockPtrPhys::NULL
        };
        loop {
            if let Some(reason) = self.chain_end(&cur) {
                end.reason = reason;
                return end;
            }
            // Never read where the pointer cannot be: the error would hide why.
            let result = match self.check_ptr(&cur, cursor.expected_seq, cursor.limit_pos) {
                Ok(()) => self.read_checked(dev, &cur),
                Err(why) => Err(BlockError::BadPointer(why)),
            };
            let valid = match self.accept(&mut cursor, cur, result) {
                Ok(valid) => valid,
                Err(reason) => {
                    end.reason = reason;
                    return end;
                }
            };
            let prev = valid.block.prev;
            if self.deliver(&mut end, valid, visit).is_break() {
                end.reason = StopReason::Cancelled;
                return end;
            }
            (cur, next) = if two_chains {
                (next, prev)
            } else {
                (prev, LogBlockPtrPhys::NULL)
            };
        }
    }

    /// Follows one chain from `ptr`, reading and decoding each block and sending it to
    /// the walk, until the chain ends, a block fails, or the walk hangs up.
    fn follow_chain(
        &self,
        dev: &dyn BlockDevice,
        mut ptr: LogBlockPtrPhys,
        tx: mpsc::SyncSender<ChainMsg>,
    ) {
        loop {
            if let Some(reason) = self.chain_end(&ptr) {
                let _ = tx.send(ChainMsg::End(reason));
                return;
            }
            // Only the bounds here; the walk checks sequence and order on receipt.
            let result = match self.check_ptr(&ptr, ptr.sequence, self.header.write_hand_pos) {
                Ok(()) => self.read_checked(dev, &ptr),
                Err(why) => Err(BlockError::BadPointer(why)),
            };
            let next = result.as_ref().ok().map(|(block, _)| block.prev);
            if tx.send(ChainMsg::Block(ptr, result)).is_err() {
                return;
            }
            match next {
                Some(prev) => ptr = prev,
                None => return,
            }
        }
    }

    /// Takes blocks from the two chain followers alternately (the walk order of two
    /// interleaved chains) and accepts each in turn.
    fn merge(
        &self,
        visit: &mut dyn FnMut(ValidBlock) -> ControlFlow<()>,
        chains: [mpsc::Receiver<ChainMsg>; 2],
    ) -> WalkEnd {
        let mut end = WalkEnd {
            reason: StopReason::ChainEnd,
            blocks_valid: 0,
            bytes_valid: 0,
        };
        let mut cursor = self.cursor();
        let mut turn = 0;
        loop {
            let (ptr, result) = match chains[turn].recv() {
                Ok(ChainMsg::Block(ptr, result)) => (ptr, result),
                Ok(ChainMsg::End(reason)) => {
                    end.reason = reason;
                    return end;
                }
                // A follower stops sending only after an error the walk has already
                // seen, so this is not reached; end cleanly anyway.
                Err(_) => return end,
            };
            let valid = match self.accept(&mut cursor, ptr, result) {
                Ok(valid) => valid,
                Err(reason) => {
                    end.reason = reason;
                    return end;
                }
            };
            if self.deliver(&mut end, valid, visit).is_break() {
                end.reason = StopReason::Cancelled;
                return end;
            }
            turn ^= 1;
        }
    }

    /// Checks a pointer against the geometry, the hands and the walk so far.
    fn check_ptr(
        &self,
        ptr: &LogBlockPtrPhys,
        expected_seq: u64,
        limit_pos: u64,
    ) -> Result<(), String> {
        let ring = self.geo.ring_bytes();
        let asize = ptr.asize(self.geo.sector_bytes);
        if ptr.sequence != expected_seq {
            return Err(format!(
                "sequence {} where {expected_seq} was expected",
                ptr.sequence
            ));
        }
        match ptr.block_pos.checked_add(asize) {
            Some(end) if end <= limit_pos => {}
            _ => {
                return Err(format!(
                    "block at {} (+{asize}) ends past {limit_pos}",
                    ptr.block_pos
                ));
            }
        }
        if ptr.block_pos % ring + asize > ring {
            return Err(format!("block at {} straddles the ring end", ptr.block_pos));
        }
        if ptr.payload_bytes > ring / 2 {
            return Err(format!(
                "payload of {} bytes is implausible",
                ptr.payload_bytes
            ));
        }
        Ok(())
    }

    /// Reads, verifies and decodes the block `ptr` points at, and checks its entries
    /// ([`Walker::check_block`]): the work a chain follower does off the walk's thread.
    fn read_checked(
        &self,
        dev: &dyn BlockDevice,
        ptr: &LogBlockPtrPhys,
    ) -> Result<Checked, BlockError> {
        let block = read_block(dev, &self.geo, ptr)?;
        let entry_pos = self.check_block(ptr, &block)?;
        Ok((block, entry_pos))
    }

    /// Checks a decoded block's entries against the ring and the block's payload range,
    /// returning each data entry's ring position.
    fn check_block(
        &self,
        ptr: &LogBlockPtrPhys,
        block: &LogBlockPhys,
    ) -> Result<Vec<Option<u64>>, BlockError> {
        if block.entries.len() > self.header.entries_per_block as usize {
            return Err(BlockError::BadEntry {
                index: block.entries.len(),
                reason: format!(
                    "{} entries, more than the device's {}",
                    block.entries.len(),
                    self.header.entries_per_block
                ),
            });
        }
        let want_prev = ptr
            .sequence
            .saturating_sub(u64::from(self.header.chain_count));
        if !block.prev.is_null() && block.prev.sequence != want_prev {
            return Err(BlockError::BadPointer(format!(
                "prev_lbp sequence {} in block {}, expected {want_prev}",
                block.prev.sequence, ptr.sequence
            )));
        }
        let mut prev_end = ptr.payload_start_pos;
        let mut out = Vec::with_capacity(block.entries.len());
        for (index, entry) in block.entries.iter().enumerate() {
            if entry.kind == EntryKind::Tombstone {
                out.push(None);
                continue;
            }
            let pos = self
                .entry_pos(ptr, entry, prev_end)
                .map_err(|reason| BlockError::BadEntry { index, reason })?;
            // Cannot overflow: entry_pos checked the record ends within its block's payload.
            prev_end = pos + self.geo.asize(u64::from(entry.physical_size));
            out.push(Some(pos));
        }
        Ok(out)
    }

    /// The ring position of a data entry's record: the one copy of its device offset
    /// that lies before the block, within one lap. It must lie inside the block's payload
    /// and after the previous entry's record.
    fn entry_pos(
        &self,
        ptr: &LogBlockPtrPhys,
        entry: &LogEntryPhys,
        min_pos: u64,
    ) -> Result<u64, String> {
        let ring = self.geo.ring_bytes();
        let asize = self.geo.asize(u64::from(entry.physical_size));
        let offset = entry
            .daddr
            .checked_sub(self.geo.ring_start)
            .filter(|&o| o < ring)
            .ok_or_else(|| format!("daddr {} outside the ring", entry.daddr))?;
        if offset % self.geo.sector_bytes != 0 || offset + asize > ring {
            return Err(format!(
                "record at daddr {} (+{asize}) is misplaced",
                entry.daddr
            ));
        }
        let block_offset = ptr.block_pos % ring;
        let lap_base = ptr.block_pos - block_offset;
        let pos = if offset < block_offset {
            lap_base + offset
        } else {
            lap_base
                .checked_sub(ring)
                .ok_or_else(|| format!("daddr {} is after its log block", entry.daddr))?
                + offset
        };
        if pos < min_pos || pos.checked_add(asize).is_none_or(|end| end > ptr.block_pos) {
            return Err(format!(
                "record at ring position {pos} (+{asize}) outside payload {}..{}",
                min_pos, ptr.block_pos
            ));
        }
        Ok(pos)
    }
}

/// Reads, verifies and decodes the block `ptr` points at.
fn read_block(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    ptr: &LogBlockPtrPhys,
) -> Result<LogBlockPhys, BlockError> {
    let mut buf = AlignedBuf::zeroed(ptr.asize(geo.sector_bytes) as usize);
    dev.read_at(&mut buf, geo.daddr(ptr.block_pos))?;
    LogBlockPhys::decode_physical(&buf, ptr).map_err(|e| match e {
        FormatError::BadChecksum { .. } => BlockError::Checksum(e),
        _ => BlockError::Decode(e),
    })
}

/// Where a rebuild is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildProgress {
    /// Log blocks read so far.
    pub log_blocks: u64,
    /// Entries restored so far.
    pub entries: u64,
    /// Ring bytes between the write hand and the block just read.
    pub ring_bytes_walked: u64,
    /// Ring bytes between the write hand and the evict floor (the most a walk covers).
    pub ring_bytes_total: u64,
}

/// A progress callback: called after every log block; `Break` cancels the rebuild.
pub type ProgressFn<'a> = dyn FnMut(&RebuildProgress) -> ControlFlow<()> + 'a;

/// Options of a rebuild.
#[derive(Default)]
pub struct RebuildOptions<'a> {
    /// Read one block ahead on the other chain (on by default in the engine).
    pub prefetch: bool,
    /// Stop after restoring this many entries (OpenZFS's low-memory valve).
    pub max_entries: Option<u64>,
    /// Called after every log block; `Break` cancels the rebuild.
    pub progress: Option<&'a mut ProgressFn<'a>>,
}

/// A live entry restored from the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoredEntry {
    /// The entry as it was logged.
    pub entry: LogEntryPhys,
    /// Ring position of its record.
    pub ring_pos: u64,
}

/// One entry of the log as a streaming rebuild ([`rebuild_with`]) meets it, newest
/// first: a data entry whose record lies above the evict floor, or a tombstone.
#[derive(Clone, Copy, Debug)]
pub struct Sighting<'a> {
    /// The entry as it was logged.
    pub entry: &'a LogEntryPhys,
    /// Ring position of its record; `None` for a tombstone.
    pub ring_pos: Option<u64>,
}

impl Sighting<'_> {
    /// The block the entry is about.
    pub fn key(&self) -> BlockKey {
        BlockKey {
            volume_guid: self.entry.volume_guid,
            block_number: self.entry.block_number,
        }
    }
}

/// What the visitor of [`rebuild_with`] answers for a [`Sighting`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The first entry of its key in the walk: it is the live one (a data entry is
    /// restored, a tombstone hides every older entry of the key). The visitor remembers
    /// the key from now on.
    First,
    /// The first data entry of its key, which the visitor does not restore (the engine
    /// tombstones it instead: a volume it does not have, over its index's cap): it hides
    /// the key's older entries as [`Seen::First`] does, but is not counted as restored.
    Dropped,
    /// A newer entry or tombstone of the key came before: this one is superseded.
    Again,
}

/// What a streaming rebuild ([`rebuild_with`]) hands the log's entries to. Any
/// `FnMut(Sighting) -> Seen` closure is one.
pub trait Restorer {
    /// One entry, newest first: whether it is the first of its key.
    fn sight(&mut self, sighting: Sighting<'_>) -> Seen;
}

impl<F: FnMut(Sighting<'_>) -> Seen> Restorer for F {
    fn sight(&mut self, sighting: Sighting<'_>) -> Seen {
        self(sighting)
    }
}

/// Rebuild counters (OpenZFS `l2_rebuild_*` names; the last five are larch's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildStats {
    /// 1 if the walk reached the natural end of the log.
    pub l2_rebuild_success: u64,
    /// Log blocks that could not be read.
    pub l2_rebuild_io_errors: u64,
    /// Log blocks with a bad checksum.
    pub l2_rebuild_cksum_lb_errors: u64,
    /// 1 if the entry limit stopped the rebuild.
    pub l2_rebuild_lowmem: u64,
    /// Σ logical size of restored entries.
    pub l2_rebuild_size: u64,
    /// Σ aligned size of restored entries.
    pub l2_rebuild_asize: u64,
    /// Entries restored.
    pub l2_rebuild_bufs: u64,
    /// Log blocks read and accepted.
    pub l2_rebuild_log_blks: u64,
    /// Log blocks that failed to decode (magic, fields, compression).
    pub l2_rebuild_lb_errors: u64,
    /// Pointers that did not fit the geometry, hands or chain.
    pub l2_rebuild_ptr_errors: u64,
    /// Blocks refused because an entry was out of range.
    pub l2_rebuild_entry_errors: u64,
    /// Entries hidden by a newer entry or tombstone of the same block.
    pub l2_rebuild_superseded: u64,
    /// Entries whose record lay behind the evict hand.
    pub l2_rebuild_evicted: u64,
}

impl RebuildStats {
    /// Every counter with its name, for stats pages and `larch dump`.
    pub fn counters(&self) -> [(&'static str, u64); 13] {
        [
            ("l2_rebuild_success", self.l2_rebuild_success),
            ("l2_rebuild_io_errors", self.l2_rebuild_io_errors),
            (
                "l2_rebuild_cksum_lb_errors",
                self.l2_rebuild_cksum_lb_errors,
            ),
            ("l2_rebuild_lowmem", self.l2_rebuild_lowmem),
            ("l2_rebuild_size", self.l2_rebuild_size),
            ("l2_rebuild_asize", self.l2_rebuild_asize),
            ("l2_rebuild_bufs", self.l2_rebuild_bufs),
            ("l2_rebuild_log_blks", self.l2_rebuild_log_blks),
            ("l2_rebuild_lb_errors", self.l2_rebuild_lb_errors),
            ("l2_rebuild_ptr_errors", self.l2_rebuild_ptr_errors),
            ("l2_rebuild_entry_errors", self.l2_rebuild_entry_errors),
            ("l2_rebuild_superseded", self.l2_rebuild_superseded),
            ("l2_rebuild_evicted", self.l2_rebuild_evicted),
        ]
    }
}

/// How a streaming rebuild ([`rebuild_with`]) ended.
#[derive(Debug)]
pub struct RebuildEnd {
    /// Accepted log blocks, newest first (64 bytes each: one per ~1000 entries).
    pub blocks: Vec<LogBlockPtrPhys>,
    /// Why the walk stopped.
    pub stop: StopReason,
    /// Counters.
    pub stats: RebuildStats,
}

/// What a rebuild found.
#[derive(Debug)]
pub struct RebuildOutcome {
    /// Live entries, newest first, with tombstones and duplicates applied.
    pub entries: Vec<RestoredEntry>,
    /// Accepted log blocks, newest first.
    pub blocks: Vec<LogBlockPtrPhys>,
    /// Why the walk stopped.
    pub stop: StopReason,
    /// Counters.
    pub stats: RebuildStats,
}

/// Rebuilds the live entries of a device whose header was validated with
/// [`validate_header`], collecting them: [`rebuild_with`] with a set of the keys seen and
/// a vector of the entries restored (about 100 bytes per entry while it runs). Tools and
/// tests use it; the engine streams instead.
pub fn rebuild(
    dev: &dyn BlockDevice,
    header: &DevHeaderPhys,
    options: &mut RebuildOptions<'_>,
) -> RebuildOutcome {
    let mut entries = Vec::new();
    let mut seen: HashSet<BlockKey> = HashSet::new();
    let end = rebuild_with(dev, header, options, &mut |sighting: Sighting<'_>| {
        if !seen.insert(sighting.key()) {
            return Seen::Again;
        }
        if let Some(ring_pos) = sighting.ring_pos {
            entries.push(RestoredEntry {
                entry: *sighting.entry,
                ring_pos,
            });
        }
        Seen::First
    });
    RebuildOutcome {
        entries,
        blocks: end.blocks,
        stop: end.stop,
        stats: end.stats,
    }
}

/// The streaming rebuild: walks the log of a device whose header was validated with
/// [`validate_header`] and hands `restorer` every entry newest first, as each block is
/// accepted, data entries whose record lies behind the evict hand excepted
/// (counted as evicted). The restorer keeps the set of keys it has met and answers for
/// each entry whether it is the first of its key ([`Seen::First`]: a data entry is
/// restored, a tombstone hides the key from then on; [`Seen::Dropped`]: a data entry the
/// restorer does not restore, which hides the key all the same) or not ([`Seen::Again`]:
/// superseded). The restored counters (`l2_rebuild_bufs`, `_size`, `_asize`) count the
/// data entries answered [`Seen::First`]. Nothing per entry is kept here, so the caller
/// decides what a restored entry costs in memory.
///
/// The counters, the progress callback, `max_entries` (checked after each block, against
/// the data entries restored so far) and cancellation behave as in [`rebuild`], which is
/// this function with a collecting closure.
pub fn rebuild_with(
    dev: &dyn BlockDevice,
    header: &DevHeaderPhys,
    options: &mut RebuildOptions<'_>,
    restorer: &mut dyn Restorer,
) -> RebuildEnd {
    let geo = Walker::new(header).geo;
    let floor_pos = header.evict_hand_pos.saturating_sub(geo.ring_bytes());
    let mut stats = RebuildStats::default();
    let mut blocks = Vec::with_capacity(header.log_block_count.min(1 << 16) as usize);
    let mut progress = RebuildProgress {
        ring_bytes_total: header.write_hand_pos - floor_pos.min(header.write_hand_pos),
        ..RebuildProgress::default()
    };
    let mut hit_limit = false;
    let mut on_block = |valid: ValidBlock| {
        blocks.push(valid.ptr);
        stats.l2_rebuild_log_blks += 1;
        // Newest first: the last entry of the block was appended last.
        for (entry, pos) in valid.block.entries.iter().zip(&valid.entry_pos).rev() {
            if let Some(pos) = *pos
                && pos < floor_pos
            {
                stats.l2_rebuild_evicted += 1;
                continue;
            }
            let ring_pos = *pos;
            match restorer.sight(Sighting { entry, ring_pos }) {
                Seen::Again => stats.l2_rebuild_superseded += 1,
                Seen::Dropped => {}
                Seen::First if ring_pos.is_some() => {
                    stats.l2_rebuild_bufs += 1;
                    stats.l2_rebuild_size += u64::from(entry.logical_size);
                    stats.l2_rebuild_asize += geo.asize(u64::from(entry.physical_size));
                }
                Seen::First => {}
            }
        }
        progress.log_blocks += 1;
        progress.entries = stats.l2_rebuild_bufs;
        progress.ring_bytes_walked = header.write_hand_pos.saturating_sub(valid.ptr.block_pos);
        if let Some(limit) = options.max_entries
            && progress.entries >= limit
        {
            hit_limit = true;
            return ControlFlow::Break(());
        }
        match options.progress.as_mut() {
            Some(callback) => callback(&progress),
            None => ControlFlow::Continue(()),
        }
    };
    let end = walk_log(dev, header, options.prefetch, &mut on_block);
    let mut stop = end.reason;
    if hit_limit {
        stop = StopReason::EntryLimit;
        stats.l2_rebuild_lowmem = 1;
    }
    match &stop {
        StopReason::ChainEnd | StopReason::EvictHand => stats.l2_rebuild_success = 1,
        StopReason::Invalid { error, .. } => match error {
            BlockError::Io(_) => stats.l2_rebuild_io_errors += 1,
            BlockError::Checksum(_) => stats.l2_rebuild_cksum_lb_errors += 1,
            BlockError::Decode(_) => stats.l2_rebuild_lb_errors += 1,
            BlockError::BadPointer(_) => stats.l2_rebuild_ptr_errors += 1,
            BlockError::BadEntry { .. } => stats.l2_rebuild_entry_errors += 1,
        },
        StopReason::EntryLimit | StopReason::Cancelled => {}
    }
    RebuildEnd {
        blocks,
        stop,
        stats,
    }
}

//! The ring writer: placement, eviction, log commits and header updates.

use std::collections::{BTreeMap, VecDeque};
use std::ops::ControlFlow;

use larch_format::{
    ArcState, Compression, ContentType, DevHeaderPhys, EntryKind, FLAG_FIRST_SWEEP,
    HEADER_SLOT_BYTES, LOG_BLOCK_MAX_ENTRIES, LogBlockPhys, LogBlockPtrPhys, LogEntryPhys,
    MAX_RECORD_BYTES, VERSION,
};
use larch_io::{AlignedBuf, BlockDevice};
use larch_policy::ring::RingSpace;

use crate::rebuild::{
    RebuildEnd, RebuildOptions, RebuildOutcome, Restorer, read_header, rebuild, rebuild_with,
    validate_header,
};
use crate::{BlockKey, Geometry, L2Error};

/// How to format a new cache device.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Pool the device belongs to.
    pub pool_guid: u64,
    /// This device's guid; a rebuild refuses a header with another one.
    pub device_guid: u64,
    /// Allocation unit of the ring: a power of two, at least the device's alignment.
    pub sector_bytes: u64,
    /// Entries per full log block (1..=1022).
    pub entries_per_block: u32,
    /// 2 (the default) interleaves two chains so a rebuild reads one block ahead; 1 is a
    /// single chain, kept to measure the difference.
    pub chain_count: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        Self {
            pool_guid: 0,
            device_guid: 0,
            sector_bytes: 4096,
            entries_per_block: LOG_BLOCK_MAX_ENTRIES as u32,
            chain_count: 2,
        }
    }
}

/// One record to cache: a block's bytes as they will be stored, and what the log says
/// about them.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Which block.
    pub key: BlockKey,
    /// Generation (TXG) of the contents.
    pub generation: u64,
    /// The bytes to store (compressed if `compression` says so).
    pub bytes: &'a [u8],
    /// Size when decompressed (equal to `bytes.len()` when uncompressed).
    pub logical_size: u32,
    /// Compression of `bytes`.
    pub compression: Compression,
    /// Data or metadata.
    pub content: ContentType,
    /// ARC state of the block when it was fed.
    pub arc_state: ArcState,
    /// Whether a prefetch brought the block in.
    pub prefetch: bool,
}

/// Where a record went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Device offset of the record.
    pub daddr: u64,
    /// Ring position of the record.
    pub ring_pos: u64,
    /// Bytes it occupies (its size rounded up to a sector).
    pub asize: u64,
    /// xxh3-64 of the record's bytes, to verify reads.
    pub data_checksum: u64,
}

/// A live record the evict hand passed: its bytes may now be overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvictedRecord {
    /// Which block.
    pub key: BlockKey,
    /// Generation of the cached contents.
    pub generation: u64,
    /// Device offset the record had.
    pub daddr: u64,
    /// Ring position the record had.
    pub ring_pos: u64,
}

/// A record in the writer's offset index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexedRecord {
    /// Which block.
    pub key: BlockKey,
    /// Generation of the cached contents.
    pub generation: u64,
    /// Bytes it occupies on the ring.
    pub asize: u64,
}

/// What a batch did.
#[derive(Clone, Debug, Default)]
pub struct BatchOutcome {
    /// One placement per record, in order.
    pub placements: Vec<Placement>,
    /// Records whose space the evict hand passed during the batch. The caller drops its
    /// L2 headers for them (comparing `daddr`/`generation`, since it may already have
    /// dropped or replaced some).
    pub evicted: Vec<EvictedRecord>,
    /// Log blocks the batch committed.
    pub log_blocks_committed: u64,
    /// Every record at a ring position below this is dead after the batch (the evict
    /// hand minus one ring). Callers that keep their own index without
    /// [`L2Device::set_track_records`] drop entries below it.
    pub evict_floor: u64,
}

/// Counters of a device since it was opened (OpenZFS names where they match).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2Stats {
    /// Batches that wrote something (`l2_writes_done`).
    pub batches: u64,
    /// Records written.
    pub records_written: u64,
    /// Ring bytes of records written (aligned).
    pub data_bytes: u64,
    /// Log blocks written (`l2_log_blk_writes`).
    pub log_blocks_written: u64,
    /// Ring bytes of log blocks written (aligned).
    pub log_bytes: u64,
    /// Ring bytes skipped at the ring end because the next item did not fit.
    pub gap_bytes: u64,
    /// Tombstones appended.
    pub tombstones: u64,
    /// Header writes.
    pub header_writes: u64,
    /// Records the evict hand passed.
    pub evicted_records: u64,
    /// Log blocks the evict hand passed.
    pub evicted_log_blocks: u64,
}

/// Everything a batch will do, computed before any I/O.
struct Plan {
    /// Items in ring order.
    items: Vec<Item>,
    placements: Vec<Placement>,
    inserts: Vec<(u64, IndexedRecord)>,
    blocks: Vec<LogBlockPtrPhys>,
    open_entries: Vec<LogEntryPhys>,
    open_payload_start: Option<u64>,
    newest: [LogBlockPtrPhys; 2],
    log_sequence: u64,
    start_pos: u64,
    end_pos: u64,
    gap_bytes: u64,
}

enum Item {
    Record { pos: u64, index: usize, asize: u64 },
    Log { pos: u64, bytes: Vec<u8> },
}

impl Item {
    fn pos(&self) -> u64 {
        match self {
            Item::Record { pos, .. } | Item::Log { pos, .. } => *pos,
        }
    }
    fn asize(&self) -> u64 {
        match self {
            Item::Record { asize, .. } => *asize,
            Item::Log { bytes, .. } => bytes.len() as u64,
        }
    }
}

/// Empties a device's persistent log without touching its ring or its geometry: writes a
/// header that supersedes the newest one on the device (the next sequence number, the
/// same hands) and points at no log block, then flushes. A rebuild then restores nothing.
///
/// This is how a log that may hold superseded copies is made harmless when their
/// tombstones cannot be written. It is safe against torn writes: the new header is one
/// slot; if it tears, that slot is damaged and an open refuses the device (it never falls
/// back to the older header, see [`read_header`]). A writer that still holds the device
/// later writes its own headers over it, which is only right if everything that writer
/// logged is current (the engine's rebuild-end commit, which carries the tombstones).
/// Returns the header written.
pub fn forget_log(dev: &dyn BlockDevice) -> Result<DevHeaderPhys, L2Error> {
    let read = read_header(dev)?;
    forget_log_after(dev, &read.header)
}

/// [`forget_log`] for a caller that knows the newest header on the device (the one it
/// read when it opened it, or its writer's last), so nothing is read.
pub fn forget_log_after(
    dev: &dyn BlockDevice,
    newest: &DevHeaderPhys,
) -> Result<DevHeaderPhys, L2Error> {
    let mut header = *newest;
    header.sequence += 1;
    header.newest = [LogBlockPtrPhys::NULL; 2];
    header.log_block_count = 0;
    header.log_block_bytes = 0;
    let buf = AlignedBuf::from_slice_padded(&header.encode(), HEADER_SLOT_BYTES as usize);
    dev.write_at(&buf, Geometry::header_offset(header.slot()))?;
    dev.flush()?;
    Ok(header)
}

/// A cache device's ring and log, usable without the ARC.
///
/// Not internally synchronised: one feeder owns it. Readers of cached records use the
/// device directly and verify what they read against the entry's checksum
/// ([`crate::read_verified`]).
pub struct L2Device<D: BlockDevice> {
    dev: D,
    geo: Geometry,
    pool_guid: u64,
    device_guid: u64,
    entries_per_block: usize,
    chain_count: u32,
    /// The write and evict hands (the ring arithmetic the simulator shares).
    space: RingSpace,
    header_sequence: u64,
    log_sequence: u64,
    newest: [LogBlockPtrPhys; 2],
    open_entries: Vec<LogEntryPhys>,
    open_payload_start: Option<u64>,
    live_blocks: VecDeque<LogBlockPtrPhys>,
    live_block_bytes: u64,
    index: BTreeMap<u64, IndexedRecord>,
    track_records: bool,
    stats: L2Stats,
    poisoned: bool,
    /// The headers it writes point at no log ([`L2Device::hide_log`]).
    log_hidden: bool,
}

impl<D: BlockDevice> L2Device<D> {
    /// Formats `dev` as an empty cache device and returns its writer.
    pub fn create(dev: D, options: &CreateOptions) -> Result<Self, L2Error> {
        if !(1..=2).contains(&options.chain_count) {
            return Err(L2Error::InvalidOptions(format!(
                "chain_count {} is not 1 or 2",
                options.chain_count
            )));
        }
        let epb = options.entries_per_block as usize;
        if !(1..=LOG_BLOCK_MAX_ENTRIES).contains(&epb) {
            return Err(L2Error::InvalidOptions(format!(
                "entries_per_block {epb} is not in 1..={LOG_BLOCK_MAX_ENTRIES}"
            )));
        }
        if options.sector_bytes < dev.alignment_bytes() {
            return Err(L2Error::InvalidOptions(format!(
                "sector_bytes {} is below the device alignment {}",
                options.sector_bytes,
                dev.alignment_bytes()
            )));
        }
        let geo = Geometry::for_device(dev.len_bytes(), options.sector_bytes)?;
        let mut l2 = Self::empty(dev, geo, options.pool_guid, options.device_guid, epb);
        l2.chain_count = options.chain_count;
        // Invalidate slot 0 durably before slot 1 gets the new header: otherwise an old
        // header with a higher sequence could win after a crash.
        l2.dev
            .write_at(&AlignedBuf::zeroed(HEADER_SLOT_BYTES as usize), 0)?;
        l2.dev.flush()?;
        l2.write_header()?;
        Ok(l2)
    }

    /// Opens a formatted device: reads and validates the header, rebuilds the log, and
    /// returns a writer that resumes where the durable header left off, together with
    /// the live entries (newest first) and the rebuild counters.
    ///
    /// `expect` gives the pool and device guids the header must carry (`None` accepts
    /// any, for tools). The writer's index holds exactly the returned entries.
    pub fn open(
        dev: D,
        expect: Option<(u64, u64)>,
        options: &mut RebuildOptions<'_>,
    ) -> Result<(Self, RebuildOutcome), L2Error> {
        let (header, geo) = Self::read_valid_header(&dev, expect)?;
        let outcome = rebuild(&dev, &header, options);
        let mut l2 = Self::resume(dev, geo, &header, &outcome.blocks);
        for restored in &outcome.entries {
            let e = &restored.entry;
            l2.index.insert(
                restored.ring_pos,
                IndexedRecord {
                    key: BlockKey {
                        volume_guid: e.volume_guid,
                        block_number: e.block_number,
                    },
                    generation: e.generation,
                    asize: geo.asize(u64::from(e.physical_size)),
                },
            );
        }
        Ok((l2, outcome))
    }

    /// [`L2Device::open`] with a streaming rebuild ([`rebuild_with`]): `restorer` meets every
    /// entry of the log newest first and keeps what it wants; the writer keeps no record
    /// index (as after [`L2Device::set_track_records`]`(false)`), so nothing per entry is
    /// held here. What the engine opens its cache devices with.
    pub fn open_with(
        dev: D,
        expect: Option<(u64, u64)>,
        options: &mut RebuildOptions<'_>,
        restorer: &mut dyn Restorer,
    ) -> Result<(Self, RebuildEnd), L2Error> {
        let (header, geo) = Self::read_valid_header(&dev, expect)?;
        let end = rebuild_with(&dev, &header, options, restorer);
        let mut l2 = Self::resume(dev, geo, &header, &end.blocks);
        l2.track_records = false;
        Ok((l2, end))
    }

    fn read_valid_header(
        dev: &D,
        expect: Option<(u64, u64)>,
    ) -> Result<(DevHeaderPhys, Geometry), L2Error> {
        let read = read_header(dev)?;
        let geo = validate_header(&read.header, dev.len_bytes(), expect)?;
        Ok((read.header, geo))
    }

    /// A writer that resumes after `header`, whose rebuild accepted `blocks` (newest
    /// first).
    fn resume(dev: D, geo: Geometry, header: &DevHeaderPhys, blocks: &[LogBlockPtrPhys]) -> Self {
        let mut l2 = Self::empty(
            dev,
            geo,
            header.pool_guid,
            header.device_guid,
            header.entries_per_block as usize,
        );
        l2.chain_count = header.chain_count;
        l2.space = RingSpace::resume(
            geo.ring_bytes(),
            geo.sector_bytes,
            header.write_hand_pos,
            header.evict_hand_pos,
        );
        l2.header_sequence = header.sequence;
        l2.log_sequence = header.newest[0].sequence;
        l2.newest = header.newest;
        for ptr in blocks.iter().rev() {
            l2.live_blocks.push_back(*ptr);
            l2.live_block_bytes += ptr.asize(geo.sector_bytes);
        }
        l2
    }

    fn empty(dev: D, geo: Geometry, pool_guid: u64, device_guid: u64, epb: usize) -> Self {
        Self {
            dev,
            geo,
            pool_guid,
            device_guid,
            entries_per_block: epb,
            chain_count: 2,
            space: RingSpace::new(geo.ring_bytes(), geo.sector_bytes),
            header_sequence: 0,
            log_sequence: 0,
            newest: [LogBlockPtrPhys::NULL; 2],
            open_entries: Vec::with_capacity(epb),
            open_payload_start: None,
            live_blocks: VecDeque::new(),
            live_block_bytes: 0,
            index: BTreeMap::new(),
            track_records: true,
            stats: L2Stats::default(),
            poisoned: false,
            log_hidden: false,
        }
    }

    /// The largest record this ring takes: 1/16 of the ring, at most 16 MiB.
    pub fn max_record_bytes(&self) -> u64 {
        (self.geo.ring_bytes() / 16).min(u64::from(MAX_RECORD_BYTES))
    }

    /// The most ring bytes one batch may span (records, log blocks and the skipped tail):
    /// a quarter of the ring, as `larch_policy::ring::RingSpace::max_batch_bytes` says.
    pub fn max_batch_bytes(&self) -> u64 {
        self.space.max_batch_bytes()
    }

    /// Whether the evict hand is still in its first lap: nothing on the ring was
    /// overwritten yet (the feed's admission rule waits for it, `larch_policy::feed`).
    pub fn first_sweep(&self) -> bool {
        self.space.first_sweep()
    }

    /// A log block is committed early once its records span this many ring bytes, so
    /// that every block's payload stays far behind the evict hand.
    fn max_payload_span_bytes(&self) -> u64 {
        self.geo.ring_bytes() / 8
    }

    /// Sets how far past the end of a batch the evict hand is moved when it must move
    /// (bigger means fewer header writes; at most 1/16 of the ring).
    pub fn set_evict_ahead_bytes(&mut self, bytes: u64) {
        self.space.set_evict_ahead_bytes(bytes);
    }

    /// Appends `records` at the write hand: moves the evict hand first (durably) if the
    /// batch needs the space, writes the records and any log blocks they fill in one
    /// pass of sequential writes, flushes, then rewrites the device header.
    pub fn write_batch(&mut self, records: &[Record<'_>]) -> Result<BatchOutcome, L2Error> {
        self.write_batch_with(records, |_| {})
    }

    /// [`L2Device::write_batch`] that first tells `before_overwrite` the evict floor
    /// (every record below that ring position is dead), once the moved evict hand is
    /// durable and before any byte of the batch is written: a caller drops its index
    /// entries there, so that no reader is sent to space the batch overwrites.
    pub fn write_batch_with(
        &mut self,
        records: &[Record<'_>],
        before_overwrite: impl FnOnce(u64),
    ) -> Result<BatchOutcome, L2Error> {
        self.ensure_usable()?;
        let plan = self.plan(records, false)?;
        let result = self.execute_inner(records, plan, before_overwrite);
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Whether the writer keeps its own offset index of live records
    /// ([`L2Device::live_records`], [`BatchOutcome::evicted`]); on by default. A caller
    /// with its own compact index turns it off to save memory: the writer then keeps
    /// nothing per record and reports evictions only as [`BatchOutcome::evict_floor`].
    pub fn set_track_records(&mut self, on: bool) {
        self.track_records = on;
        if !on {
            self.index = BTreeMap::new();
        }
    }

    /// The evict floor: records at ring positions below it are dead.
    pub fn evict_floor(&self) -> u64 {
        self.space.evict_floor()
    }

    /// Appends a tombstone for `key`: after the next commit, a rebuild will not return
    /// any older entry of `key`. Commits the open block if the tombstone fills it.
    /// Call [`L2Device::commit_log`] to make it durable before overwriting the block on
    /// the backing store.
    pub fn tombstone(&mut self, key: BlockKey, generation: u64) -> Result<(), L2Error> {
        self.tombstone_with(key, generation, |_| {})
    }

    /// [`L2Device::tombstone`] that tells `before_overwrite` the evict floor before a
    /// commit it makes overwrites anything (as [`L2Device::write_batch_with`] does).
    pub fn tombstone_with(
        &mut self,
        key: BlockKey,
        generation: u64,
        before_overwrite: impl FnOnce(u64),
    ) -> Result<(), L2Error> {
        self.ensure_usable()?;
        self.open_entries.push(LogEntryPhys::tombstone(
            key.volume_guid,
            key.block_number,
            generation,
        ));
        self.stats.tombstones += 1;
        if self.open_entries.len() >= self.entries_per_block {
            self.commit_log_with(before_overwrite)?;
        }
        Ok(())
    }

    /// From now on, every header it writes points at no log block, as
    /// [`forget_log_after`]'s does, until [`L2Device::reveal_log`]: its log blocks still
    /// go to the ring and chain as before, but a crash meanwhile leaves the device with an
    /// empty log. For a writer whose log was emptied on the device while it was being
    /// opened (the engine's rebuild, when a TXG wrote the backing stores meanwhile): its
    /// log may hold copies those writes superseded until the tombstones it is about to
    /// commit are all on the device, and every header before then (one that moves the
    /// evict hand, or the commit of each full block of tombstones) must not bring it back.
    pub fn hide_log(&mut self) {
        self.log_hidden = true;
    }

    /// Commits the open log block, then writes a header that points at the log again
    /// (see [`L2Device::hide_log`]): from then on a rebuild finds every block it wrote.
    pub fn reveal_log(&mut self) -> Result<(), L2Error> {
        self.commit_log()?;
        if self.log_hidden {
            self.log_hidden = false;
            if let Err(err) = self.write_header() {
                self.poisoned = true;
                return Err(err);
            }
        }
        Ok(())
    }

    /// Commits the open log block even if it is not full (a clean shutdown, or
    /// tombstones before a TXG), flushes it and rewrites the header. Returns whether a
    /// block was written.
    pub fn commit_log(&mut self) -> Result<bool, L2Error> {
        self.commit_log_with(|_| {})
    }

    /// [`L2Device::commit_log`] that tells `before_overwrite` the evict floor once a
    /// moved evict hand is durable and before the log block is written (a log block can
    /// need space too): a caller drops its index entries below it, as for a batch.
    pub fn commit_log_with(&mut self, before_overwrite: impl FnOnce(u64)) -> Result<bool, L2Error> {
        self.ensure_usable()?;
        if self.open_entries.is_empty() {
            return Ok(false);
        }
        let plan = self.plan(&[], true)?;
        if let Err(err) = self.execute_inner(&[], plan, before_overwrite) {
            self.poisoned = true;
            return Err(err);
        }
        Ok(true)
    }

    fn ensure_usable(&self) -> Result<(), L2Error> {
        if self.poisoned {
            Err(L2Error::Poisoned)
        } else {
            Ok(())
        }
    }

    fn plan(&self, records: &[Record<'_>], force_commit: bool) -> Result<Plan, L2Error> {
        let mut plan = Plan {
            items: Vec::with_capacity(records.len() + 2),
            placements: Vec::with_capacity(records.len()),
            inserts: Vec::with_capacity(records.len()),
            blocks: Vec::new(),
            open_entries: self.open_entries.clone(),
            open_payload_start: self.open_payload_start,
            newest: self.newest,
            log_sequence: self.log_sequence,
            start_pos: self.space.write_pos(),
            end_pos: self.space.write_pos(),
            gap_bytes: 0,
        };
        let max_record = self.max_record_bytes();
        for (index, record) in records.iter().enumerate() {
            let bytes = record.bytes.len() as u64;
            if bytes == 0 || bytes > max_record {
                return Err(L2Error::RecordTooLarge {
                    bytes,
                    max_bytes: max_record,
                });
            }
            let entry = self.entry_for(record, 0);
            entry
                .check()
                .map_err(|e| L2Error::InvalidOptions(format!("record {index}: {e}")))?;
            let asize = self.geo.asize(bytes);
            let pos = self.advance_to_fit(&mut plan, asize);
            let entry = LogEntryPhys {
                daddr: self.geo.daddr(pos),
                ..entry
            };
            plan.items.push(Item::Record { pos, index, asize });
            plan.open_entries.push(entry);
            plan.open_payload_start.get_or_insert(pos);
            plan.inserts.push((
                pos,
                IndexedRecord {
                    key: record.key,
                    generation: record.generation,
                    asize,
                },
            ));
            plan.placements.push(Placement {
                daddr: entry.daddr,
                ring_pos: pos,
                asize,
                data_checksum: entry.data_checksum,
            });
            plan.end_pos = pos + asize;
            let span = plan.end_pos - plan.open_payload_start.unwrap_or(plan.end_pos);
            if plan.open_entries.len() >= self.entries_per_block
                || span >= self.max_payload_span_bytes()
            {
                self.commit_into(&mut plan);
            }
        }
        if force_commit && !plan.open_entries.is_empty() {
            self.commit_into(&mut plan);
        }
        let span_bytes = plan.end_pos - plan.start_pos;
        if span_bytes > self.max_batch_bytes() {
            return Err(L2Error::BatchTooLarge {
                span_bytes,
                max_bytes: self.max_batch_bytes(),
            });
        }
        Ok(plan)
    }

    fn entry_for(&self, record: &Record<'_>, daddr: u64) -> LogEntryPhys {
        LogEntryPhys {
            kind: EntryKind::Data,
            volume_guid: record.key.volume_guid,
            block_number: record.key.block_number,
            generation: record.generation,
            daddr,
            data_checksum: larch_format::checksum(record.bytes),
            logical_size: record.logical_size,
            physical_size: record.bytes.len() as u32,
            compression: record.compression,
            content: record.content,
            arc_state: record.arc_state,
            prefetch: record.prefetch,
        }
    }

    /// The position where `asize` bytes go next, skipping the ring's tail if needed.
    fn advance_to_fit(&self, plan: &mut Plan, asize: u64) -> u64 {
        let pos = self.space.fit(plan.end_pos, asize);
        plan.gap_bytes += pos - plan.end_pos;
        pos
    }

    /// Closes the open log block of `plan` and places it at the plan's hand.
    fn commit_into(&self, plan: &mut Plan) {
        let prev = if self.chain_count == 2 {
            plan.newest[1]
        } else {
            plan.newest[0]
        };
        let block = LogBlockPhys {
            prev,
            entries: std::mem::take(&mut plan.open_entries),
        };
        let encoded = block.encode_physical(self.geo.sector_bytes);
        let pos = self.advance_to_fit(plan, encoded.bytes.len() as u64);
        let payload_start_pos = plan.open_payload_start.take().unwrap_or(pos);
        plan.log_sequence += 1;
        let ptr = LogBlockPtrPhys {
            sequence: plan.log_sequence,
            block_pos: pos,
            payload_start_pos,
            payload_bytes: pos - payload_start_pos,
            checksum: encoded.checksum,
            logical_size: encoded.logical_size,
            physical_size: encoded.physical_size,
            compression: encoded.compression,
        };
        plan.newest = [ptr, plan.newest[0]];
        plan.blocks.push(ptr);
        plan.end_pos = pos + encoded.bytes.len() as u64;
        plan.items.push(Item::Log {
            pos,
            bytes: encoded.bytes,
        });
    }

    fn execute_inner(
        &mut self,
        records: &[Record<'_>],
        plan: Plan,
        before_overwrite: impl FnOnce(u64),
    ) -> Result<BatchOutcome, L2Error> {
        let mut outcome = BatchOutcome::default();
        if let Some(evict_pos) = self.space.evict_hand_for(plan.end_pos) {
            outcome.evicted = self.advance_evict(evict_pos);
            // Rule 1 of the theory: the new evict hand is durable before any byte it
            // covers is written.
            self.write_header()?;
        }
        outcome.evict_floor = self.evict_floor();
        before_overwrite(outcome.evict_floor);
        self.write_items(records, &plan.items)?;
        self.dev.flush()?;
        self.space.advance_write(plan.end_pos);
        self.newest = plan.newest;
        self.log_sequence = plan.log_sequence;
        self.open_entries = plan.open_entries;
        self.open_payload_start = plan.open_payload_start;
        for ptr in &plan.blocks {
            self.live_blocks.push_back(*ptr);
            self.live_block_bytes += ptr.asize(self.geo.sector_bytes);
            self.stats.log_bytes += ptr.asize(self.geo.sector_bytes);
        }
        if self.track_records {
            self.index.extend(plan.inserts);
        }
        self.stats.records_written += records.len() as u64;
        self.stats.data_bytes += plan.placements.iter().map(|p| p.asize).sum::<u64>();
        self.stats.log_blocks_written += plan.blocks.len() as u64;
        self.stats.gap_bytes += plan.gap_bytes;
        if !plan.items.is_empty() {
            self.stats.batches += 1;
            self.write_header()?;
        }
        outcome.placements = plan.placements;
        outcome.log_blocks_committed = plan.blocks.len() as u64;
        Ok(outcome)
    }

    /// Writes the plan's items, one device write per contiguous run.
    fn write_items(&self, records: &[Record<'_>], items: &[Item]) -> Result<(), L2Error> {
        let ring = self.geo.ring_bytes();
        let mut run_start = 0;
        while run_start < items.len() {
            let mut run_end = run_start + 1;
            // A run ends where positions jump (the skipped tail) or where a new lap
            // starts: contiguous positions across a lap are not contiguous offsets.
            while run_end < items.len()
                && items[run_end].pos() == items[run_end - 1].pos() + items[run_end - 1].asize()
                && !items[run_end].pos().is_multiple_of(ring)
            {
                run_end += 1;
            }
            let run = &items[run_start..run_end];
            debug_assert!(run.iter().skip(1).all(|i| !i.pos().is_multiple_of(ring)));
            let first = run[0].pos();
            let len = run.iter().map(Item::asize).sum::<u64>();
            let mut buf = AlignedBuf::zeroed(len as usize);
            for item in run {
                let at = (item.pos() - first) as usize;
                let bytes = match item {
                    Item::Record { index, .. } => records[*index].bytes,
                    Item::Log { bytes, .. } => bytes.as_slice(),
                };
                buf[at..at + bytes.len()].copy_from_slice(bytes);
            }
            self.dev.write_at(&buf, self.geo.daddr(first))?;
            run_start = run_end;
        }
        Ok(())
    }

    /// Moves the evict hand to `evict_pos` and drops every record and log block whose
    /// ring space it uncovers.
    fn advance_evict(&mut self, evict_pos: u64) -> Vec<EvictedRecord> {
        self.space.advance_evict(evict_pos);
        let Some(dead_below) = evict_pos.checked_sub(self.geo.ring_bytes()) else {
            return Vec::new();
        };
        let kept = self.index.split_off(&dead_below);
        let dead = std::mem::replace(&mut self.index, kept);
        while let Some(front) = self.live_blocks.front() {
            if front.block_pos >= dead_below {
                break;
            }
            self.live_block_bytes -= front.asize(self.geo.sector_bytes);
            self.live_blocks.pop_front();
            self.stats.evicted_log_blocks += 1;
        }
        self.stats.evicted_records += dead.len() as u64;
        dead.into_iter()
            .map(|(pos, r)| EvictedRecord {
                key: r.key,
                generation: r.generation,
                daddr: self.geo.daddr(pos),
                ring_pos: pos,
            })
            .collect()
    }

    /// The header describing the current durable state.
    pub fn header(&self) -> DevHeaderPhys {
        if self.log_hidden {
            return DevHeaderPhys {
                newest: [LogBlockPtrPhys::NULL; 2],
                log_block_count: 0,
                log_block_bytes: 0,
                ..self.visible_header()
            };
        }
        self.visible_header()
    }

    fn visible_header(&self) -> DevHeaderPhys {
        DevHeaderPhys {
            version: VERSION,
            flags: if self.space.first_sweep() {
                FLAG_FIRST_SWEEP
            } else {
                0
            },
            pool_guid: self.pool_guid,
            device_guid: self.device_guid,
            ring_start: self.geo.ring_start,
            ring_end: self.geo.ring_end,
            sector_bytes: self.geo.sector_bytes as u32,
            entries_per_block: self.entries_per_block as u32,
            write_hand_pos: self.space.write_pos(),
            evict_hand_pos: self.space.evict_pos(),
            log_block_count: self.live_blocks.len() as u64,
            log_block_bytes: self.live_block_bytes,
            sequence: self.header_sequence,
            chain_count: self.chain_count,
            newest: self.newest,
        }
    }

    /// Writes the header into the slot its sequence selects, then flushes.
    fn write_header(&mut self) -> Result<(), L2Error> {
        self.header_sequence += 1;
        let header = self.header();
        let buf = AlignedBuf::from_slice_padded(&header.encode(), HEADER_SLOT_BYTES as usize);
        self.dev
            .write_at(&buf, Geometry::header_offset(header.slot()))?;
        self.dev.flush()?;
        self.stats.header_writes += 1;
        Ok(())
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The write hand (ring position).
    pub fn write_hand_pos(&self) -> u64 {
        self.space.write_pos()
    }

    /// The evict hand (ring position).
    pub fn evict_hand_pos(&self) -> u64 {
        self.space.evict_pos()
    }

    /// The offset index: every live record by ring position.
    pub fn live_records(&self) -> &BTreeMap<u64, IndexedRecord> {
        &self.index
    }

    /// Live log blocks, oldest first.
    pub fn live_log_blocks(&self) -> impl Iterator<Item = &LogBlockPtrPhys> {
        self.live_blocks.iter()
    }

    /// Entries waiting in the open log block (lost by a crash until committed).
    pub fn open_entries(&self) -> usize {
        self.open_entries.len()
    }

    /// Counters since open.
    pub fn stats(&self) -> L2Stats {
        self.stats
    }

    /// Whether an I/O error has poisoned the writer.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The underlying device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// Gives the device back.
    pub fn into_device(self) -> D {
        self.dev
    }

    /// O(n) consistency walk for tests and fuzzing: panics with the offending values if
    /// the index, the block list or the hands disagree.
    pub fn check_invariants(&self) {
        let ring = self.geo.ring_bytes();
        let (write_pos, evict_pos) = (self.space.write_pos(), self.space.evict_pos());
        let floor = self.space.evict_floor();
        assert!(
            write_pos <= evict_pos,
            "write hand {write_pos} past evict hand {evict_pos}"
        );
        let mut prev_end = 0;
        for (&pos, rec) in &self.index {
            assert!(
                pos >= floor,
                "record at {pos} below the evict floor {floor}"
            );
            assert!(
                pos >= prev_end,
                "record at {pos} overlaps the one ending at {prev_end}"
            );
            assert!(
                pos % ring + rec.asize <= ring,
                "record at {pos} straddles the ring end"
            );
            prev_end = pos + rec.asize;
        }
        assert!(
            prev_end <= write_pos,
            "record ends at {prev_end} past the write hand"
        );
        let _ = self.live_blocks.iter().try_fold(0u64, |prev_seq, b| {
            assert!(
                b.sequence > prev_seq,
                "block sequence {} after {prev_seq}",
                b.sequence
            );
            assert!(
                b.block_pos >= floor,
                "block at {} below floor {floor}",
                b.block_pos
            );
            ControlFlow::<(), u64>::Continue(b.sequence)
        });
        let bytes: u64 = self
            .live_blocks
            .iter()
            .map(|b| b.asize(self.geo.sector_bytes))
            .sum();
        assert_eq!(bytes, self.live_block_bytes, "log block bytes drifted");
    }
}

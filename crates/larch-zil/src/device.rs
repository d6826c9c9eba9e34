//! The log writer: create, open (with replay), group commit, reclaim by TXG.
//!
//! One file because its flows are one state's: create, open, the leader's rounds and the
//! header updates all change `State` under its one lock, and their invariants (ticket
//! order, reservations, the durable tail) are read together; what waits for a leader is
//! the `queue` module's, and the walk of the ring at open is `walk`'s.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use larch_format::checksum;
use larch_format::zil::{
    ZIL_COUNTER_MAX, ZIL_HEADER_SLOT_BYTES, ZilBlockPhys, ZilHeaderPhys, ZilRecordPhys,
};
use larch_io::{AlignedBuf, BlockDevice, IoError};

use crate::queue::{Pending, Queue, QueuedRecord};
use crate::walk::{self, Replay};
use crate::{Geometry, LogError, RecordRef, slot_offset};

/// Options of [`LogDevice::create_with`].
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Allocation unit of the ring, a power of two in 512..=65536. The default, 4096,
    /// keeps every block write aligned for `O_DIRECT`; 512 packs small commits tighter.
    pub sector_bytes: u64,
}

impl Default for CreateOptions {
    fn default() -> Self {
        Self { sector_bytes: 4096 }
    }
}

/// What a successful [`LogDevice::commit`] was part of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// Sequence number of the log block that holds the records (for an empty commit,
    /// the newest durable block, 0 if none).
    pub block_sequence: u64,
    /// Commit calls whose records share that block (0 for an empty commit).
    pub group_commits: u32,
    /// Records in that block.
    pub group_records: u32,
}

/// Counters and space of a log device. Names follow OpenZFS's `zil` kstats where the
/// meaning matches (noted on each); the rest are larch's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Commit calls with records that returned `Ok` (OpenZFS `zil_commit_count` counts
    /// every call).
    pub zil_commit_count: u64,
    /// Log blocks written: the rounds a leader wrote for a group (OpenZFS
    /// `zil_commit_writer_count`).
    pub zil_commit_writer_count: u64,
    /// Records made durable (OpenZFS `zil_itx_count`).
    pub zil_itx_count: u64,
    /// Record data bytes made durable, all copied inline (OpenZFS
    /// `zil_itx_copied_bytes`).
    pub zil_itx_copied_bytes: u64,
    /// Ring bytes written for blocks: heads, records and sector padding.
    pub log_bytes_written: u64,
    /// Flushes issued, for blocks and header updates alike.
    pub flushes: u64,
    /// Header updates (each writes both slots with a flush after each).
    pub header_writes: u64,
    /// Most commit calls that shared one block.
    pub group_commits_max: u64,
    /// Blocks by the number of commit calls they held: 1, 2, 3–4, 5–8, 9–16, more.
    pub group_size_hist: [u64; 6],
    /// Commit calls refused with [`LogError::Full`].
    pub full_errors: u64,
    /// Commit calls waiting for a leader to take their records right now.
    pub queued_commits: u64,
    /// Sum over successful commits of the time from the call to its return (µs).
    pub commit_latency_us_sum: u64,
    /// Sum over blocks of the time their writes took (µs).
    pub write_latency_us_sum: u64,
    /// Sum over blocks of the time their flush took (µs).
    pub flush_latency_us_sum: u64,
    /// The committed TXG as the writer knows it.
    pub committed_txg: u64,
    /// Bytes of the ring.
    pub ring_bytes: u64,
    /// Ring bytes from the durable tail to the write position (live or unreclaimed
    /// blocks).
    pub used_bytes: u64,
    /// Ring bytes promised to queued commits.
    pub reserved_bytes: u64,
    /// Ring bytes a new commit may take.
    pub free_bytes: u64,
    /// Blocks not yet reclaimed.
    pub live_blocks: u64,
    /// Completed laps of the ring since the format.
    pub laps: u64,
    /// Whether the log is poisoned.
    pub poisoned: bool,
}

/// A block at or after the tail: written or being written, not yet reclaimed.
#[derive(Clone, Copy, Debug)]
struct LiveBlock {
    pos: u64,
    sequence: u64,
    prev_checksum: u64,
    max_txg: u64,
    durable: bool,
}

/// Where a log resumes: after a create, or after the blocks replay walked.
struct Ring {
    head_pos: u64,
    next_sequence: u64,
    last_checksum: u64,
    blocks: Vec<LiveBlock>,
    committed_txg: u64,
}

/// What a caller of [`LogDevice::commit_through`] wrote as the leader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Led {
    /// Blocks written (each with one flush).
    pub blocks: u64,
    /// Records in them.
    pub records: u64,
    /// Record data bytes in them.
    pub data_bytes: u64,
    /// Time of their writes and flushes (µs).
    pub write_us: u64,
}

/// A written block, kept until every commit in it has read its [`CommitInfo`].
struct Round {
    first_ticket: u64,
    last_ticket: u64,
    info: CommitInfo,
    waiters_left: u32,
}

#[derive(Default)]
struct Counters {
    commits: u64,
    blocks: u64,
    records: u64,
    data_bytes: u64,
    log_bytes: u64,
    flushes: u64,
    header_writes: u64,
    group_max: u64,
    group_hist: [u64; 6],
    full_errors: u64,
    commit_us: u64,
    write_us: u64,
    flush_us: u64,
}

struct State {
    /// Ring position of the next block.
    head_pos: u64,
    /// Sequence number of the next block.
    next_sequence: u64,
    /// Head checksum of the newest block (the next block's `prev_checksum`).
    last_checksum: u64,
    /// Tail of the last durable header: nothing at or after it is overwritten.
    durable_tail_pos: u64,
    /// Blocks from the tail on, oldest first.
    blocks: VecDeque<LiveBlock>,
    /// Highest TXG passed to `txg_committed` (or found at open).
    committed_txg: u64,
    /// Sequence number of the last durable header: a copy of the header lock's, so that
    /// `commit` and `append` can check it (`check_counter_room`) without waiting behind a
    /// header write, which holds that lock through two writes and two flushes.
    header_sequence: u64,
    queue: Queue,
    /// Ring bytes promised to queued commit calls.
    reserved_bytes: u64,
    /// Ticket of the next commit; tickets start at 1.
    next_ticket: u64,
    /// Every ticket up to this one is durable.
    done_ticket: u64,
    /// A leader is writing a block.
    leading: bool,
    /// The first ticket of the block being written (while `leading`).
    writing_from: u64,
    rounds: VecDeque<Round>,
    poison: Option<Arc<str>>,
    counters: Counters,
}

impl State {
    /// Position, sequence and expected `prev_checksum` of the oldest unreclaimed block,
    /// or of the next block when none is left.
    fn tail(&self) -> (u64, u64, u64) {
        match self.blocks.front() {
            Some(b) => (b.pos, b.sequence, b.prev_checksum),
            None => (self.head_pos, self.next_sequence, self.last_checksum),
        }
    }

    fn free_bytes(&self, ring_bytes: u64) -> u64 {
        (self.durable_tail_pos + ring_bytes).saturating_sub(self.head_pos + self.reserved_bytes)
    }

    /// Drops durable blocks from the front whose records are all committed.
    fn reclaim(&mut self) {
        while let Some(front) = self.blocks.front() {
            if !front.durable || front.max_txg > self.committed_txg {
                break;
            }
            self.blocks.pop_front();
        }
    }

    /// Moves `done_ticket` up to just before the oldest ticket still queued or being
    /// written.
    fn settle(&mut self) {
        let mut unresolved = self.queue.first_ticket().unwrap_or(self.next_ticket);
        if self.leading {
            unresolved = unresolved.min(self.writing_from);
        }
        self.done_ticket = self.done_ticket.max(unresolved - 1);
    }

    /// A leader's block of `taken` is durable: the commit calls in it get a round to
    /// read their [`CommitInfo`] from, and the block is counted (in the log's counters and
    /// in what the leader `led`). `times`: its write's and its flush's µs.
    fn note_block(
        &mut self,
        head: &ZilBlockPhys,
        taken: &[Pending],
        asize: u64,
        times: (u64, u64),
        led: &mut Led,
    ) {
        let (write_us, flush_us) = times;
        let data_bytes = taken.iter().map(|p| p.data_bytes).sum::<u64>();
        // Commit calls read their block's numbers (appended records' callers do not).
        let callers = taken.iter().filter(|p| !p.is_appended()).count() as u32;
        if callers > 0 {
            self.rounds.push_back(Round {
                first_ticket: taken.first().map_or(0, |p| p.ticket),
                last_ticket: taken.last().map_or(0, |p| p.ticket),
                info: CommitInfo {
                    block_sequence: head.sequence,
                    group_commits: callers,
                    group_records: head.record_count,
                },
                waiters_left: callers,
            });
        }
        let commits = taken.len() as u32;
        let c = &mut self.counters;
        c.blocks += 1;
        c.records += u64::from(head.record_count);
        c.data_bytes += data_bytes;
        c.log_bytes += asize;
        c.flushes += 1;
        c.group_max = c.group_max.max(u64::from(commits));
        c.group_hist[group_bucket(commits)] += 1;
        c.write_us += write_us;
        c.flush_us += flush_us;
        led.blocks += 1;
        led.records += u64::from(head.record_count);
        led.data_bytes += data_bytes;
        led.write_us += write_us + flush_us;
    }

    /// Refuses new records once a counter the log writes is within [`ACK_HEADROOM`] of
    /// what `open` accepts: a record acknowledged now must stay replayable through the
    /// header updates and opens that follow it.
    fn check_counter_room(&self, epoch: u64) -> Result<(), LogError> {
        for (field, value) in [
            ("sequence", self.header_sequence),
            ("epoch", epoch),
            ("block sequence", self.next_sequence),
            ("position", self.head_pos),
        ] {
            if value > walk::RESUMABLE_COUNTER_MAX - ACK_HEADROOM {
                return Err(LogError::CounterExhausted { field, value });
            }
        }
        Ok(())
    }

    fn poison(&mut self, reason: String) {
        if self.poison.is_none() {
            self.poison = Some(reason.into());
        }
    }

    fn poisoned_error(&self) -> Option<LogError> {
        self.poison.as_ref().map(|reason| LogError::Poisoned {
            reason: reason.clone(),
        })
    }

    /// The [`CommitInfo`] of the block that holds `ticket`, forgetting blocks whose
    /// commits have all been told.
    fn take_info(&mut self, ticket: u64) -> CommitInfo {
        let round = self
            .rounds
            .iter_mut()
            .find(|r| (r.first_ticket..=r.last_ticket).contains(&ticket))
            .unwrap_or_else(|| panic!("durable ticket {ticket} has no round"));
        round.waiters_left -= 1;
        let info = round.info;
        while self.rounds.front().is_some_and(|r| r.waiters_left == 0) {
            self.rounds.pop_front();
        }
        info
    }
}

/// Header updates and opens a log can still make after it acknowledges a record: it
/// takes more than 2^61 - 2^32 of them to get there (millennia at a million a second),
/// so only a damaged header that still checksums brings a log near it.
const ACK_HEADROOM: u64 = 1 << 32;

/// A record's TXG and offset as the log can replay them (the decoder refuses the rest).
fn check_record(txg: u64, offset_bytes: u64) -> Result<(), LogError> {
    if txg == 0 {
        return Err(LogError::InvalidRecord("txg 0 (TXGs start at 1)"));
    }
    if txg > ZIL_COUNTER_MAX {
        return Err(LogError::InvalidRecord("txg above 2^62"));
    }
    if offset_bytes > ZIL_COUNTER_MAX {
        return Err(LogError::InvalidRecord("offset above 2^62 bytes"));
    }
    Ok(())
}

/// The header fields that stay fixed between updates.
struct HeaderState {
    last: ZilHeaderPhys,
}

/// An intent log on a log device: thread-safe, generic over the device.
///
/// `commit` blocks until the records are durable and shares blocks and flushes between
/// concurrent callers; `txg_committed` reclaims space. See the crate documentation for
/// the protocol and `docs/zil.md` for the bytes.
pub struct LogDevice<D: BlockDevice> {
    dev: D,
    geometry: Geometry,
    pool_guid: u64,
    device_guid: u64,
    epoch: u64,
    max_body_bytes: u64,
    state: Mutex<State>,
    wake: Condvar,
    /// Serialises header updates; holds the last header written.
    header: Mutex<HeaderState>,
}

impl<D: BlockDevice> std::fmt::Debug for LogDevice<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogDevice")
            .field("pool_guid", &format_args!("{:#x}", self.pool_guid))
            .field("device_guid", &format_args!("{:#x}", self.device_guid))
            .field("geometry", &self.geometry)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> LogDevice<D> {
    /// Formats `dev` as an empty log device of `pool_guid` with 4 KiB sectors. Whatever
    /// the device held is abandoned (the caller decides whether that is allowed).
    pub fn create(dev: D, pool_guid: u64, device_guid: u64) -> Result<Self, LogError> {
        Self::create_with(dev, pool_guid, device_guid, &CreateOptions::default())
    }

    /// [`LogDevice::create`] with options.
    pub fn create_with(
        dev: D,
        pool_guid: u64,
        device_guid: u64,
        options: &CreateOptions,
    ) -> Result<Self, LogError> {
        let geometry = Geometry::for_device(dev.len_bytes(), options.sector_bytes)?;
        let header = ZilHeaderPhys {
            pool_guid,
            device_guid,
            ring_start: geometry.ring_start,
            ring_end: geometry.ring_end,
            sector_bytes: geometry.sector_bytes as u32,
            sequence: 1,
            epoch: 1,
            committed_txg: 0,
            tail_pos: 0,
            tail_sequence: 1,
            tail_prev_checksum: chain_seed(pool_guid, device_guid),
        };
        // Zero both slots first, so a crash during create leaves either nothing or the
        // new header, never an older format's header beside the new one. Blocks of an
        // older format cannot join the new log: the chain seed is new.
        let zeros = AlignedBuf::zeroed(ZIL_HEADER_SLOT_BYTES as usize);
        for slot in 0..2 {
            dev.write_at(&zeros, slot_offset(slot))?;
        }
        dev.flush()?;
        let ring = Ring {
            head_pos: 0,
            next_sequence: 1,
            last_checksum: header.tail_prev_checksum,
            blocks: Vec::new(),
            committed_txg: 0,
        };
        let log = Self::assemble(dev, geometry, header, ring);
        log.write_header(&log.last_header())?;
        Ok(log)
    }

    /// Opens the log device of `pool_guid` and replays it: the committed TXG and every
    /// record of a newer TXG, in log order. Before returning, writes a header with a new
    /// epoch (and the replayed committed TXG), so nothing a crashed run left beyond the
    /// replayed blocks can ever join the log.
    ///
    /// Refuses, with a distinct error each: an unformatted device, a cache device, a
    /// device holding something else, another pool's log, an unknown format version, a
    /// header damaged in both slots, a resized device. An I/O error fails the open
    /// rather than ending the replay early.
    pub fn open(dev: D, pool_guid: u64) -> Result<(Self, Replay), LogError> {
        Self::open_checked(dev, pool_guid, None)
    }

    /// [`LogDevice::open`], refusing (before writing anything) a device whose header
    /// names another device guid than `device_guid`.
    pub fn open_device(
        dev: D,
        pool_guid: u64,
        device_guid: u64,
    ) -> Result<(Self, Replay), LogError> {
        Self::open_checked(dev, pool_guid, Some(device_guid))
    }

    fn open_checked(
        dev: D,
        pool_guid: u64,
        device_guid: Option<u64>,
    ) -> Result<(Self, Replay), LogError> {
        let slots = walk::read_slots(&dev)?;
        let chosen = walk::choose_header(&slots)?;
        let found = chosen.header;
        if found.pool_guid != pool_guid {
            return Err(LogError::ForeignPool {
                expected: pool_guid,
                found: found.pool_guid,
            });
        }
        if let Some(expected) = device_guid
            && found.device_guid != expected
        {
            return Err(LogError::ForeignDevice {
                expected,
                found: found.device_guid,
            });
        }
        let geometry = walk::check_geometry(&found, dev.len_bytes())?;
        let walked = walk::walk(&dev, &geometry, &found)?;

        // Blocks carry the committed TXG their writer knew; the newest may be ahead of a
        // header update that never became durable.
        let committed_txg = walked
            .blocks
            .last()
            .map_or(0, |b| b.head.committed_txg)
            .max(found.committed_txg);
        let mut live = Vec::with_capacity(walked.blocks.len());
        let mut records = Vec::new();
        let mut records_skipped = 0;
        // Writing resumes right after the last replayed block.
        let mut resume = (
            found.tail_pos,
            found.tail_sequence,
            found.tail_prev_checksum,
        );
        for block in walked.blocks {
            live.push(LiveBlock {
                pos: block.head.pos,
                sequence: block.head.sequence,
                prev_checksum: block.head.prev_checksum,
                max_txg: block.max_txg(),
                durable: true,
            });
            resume = (
                block.head.pos + block.asize,
                block.head.sequence + 1,
                block.head.head_checksum(),
            );
            for record in block.records {
                if record.txg > committed_txg {
                    records.push(record);
                } else {
                    records_skipped += 1;
                }
            }
        }
        let replay_blocks = live.len() as u64;
        let (head_pos, next_sequence, last_checksum) = resume;
        let ring = Ring {
            head_pos,
            next_sequence,
            last_checksum,
            blocks: live,
            committed_txg,
        };
        let header = ZilHeaderPhys {
            sequence: found.sequence + 1,
            epoch: found.epoch + 1,
            committed_txg,
            ..found
        };
        let log = Self::assemble(dev, geometry, header, ring);
        log.write_header(&log.last_header())?;
        let replay = Replay {
            committed_txg,
            records,
            blocks: replay_blocks,
            records_skipped,
            end: walked.end,
            damaged_header_slots: chosen.damaged_slots,
        };
        Ok((log, replay))
    }

    /// The log over `ring`, with what it reclaims already dropped, and the header to
    /// write before it is used: `header` with the ring's tail.
    fn assemble(dev: D, geometry: Geometry, header: ZilHeaderPhys, ring: Ring) -> Self {
        let mut state = State {
            head_pos: ring.head_pos,
            next_sequence: ring.next_sequence,
            last_checksum: ring.last_checksum,
            durable_tail_pos: 0,
            blocks: ring.blocks.into(),
            committed_txg: ring.committed_txg,
            header_sequence: header.sequence,
            queue: Queue::default(),
            reserved_bytes: 0,
            next_ticket: 1,
            done_ticket: 0,
            leading: false,
            writing_from: 0,
            rounds: VecDeque::new(),
            poison: None,
            counters: Counters::default(),
        };
        state.reclaim();
        let (tail_pos, tail_sequence, tail_prev_checksum) = state.tail();
        // Only the callers' header write makes this tail durable; nothing is written
        // before it.
        state.durable_tail_pos = tail_pos;
        let header = ZilHeaderPhys {
            tail_pos,
            tail_sequence,
            tail_prev_checksum,
            ..header
        };
        Self {
            max_body_bytes: geometry.max_body_bytes(),
            dev,
            geometry,
            pool_guid: header.pool_guid,
            device_guid: header.device_guid,
            epoch: header.epoch,
            state: Mutex::new(state),
            wake: Condvar::new(),
            header: Mutex::new(HeaderState { last: header }),
        }
    }

    fn last_header(&self) -> ZilHeaderPhys {
        self.header.lock().expect("log header lock").last
    }

    /// Makes `records` durable in the log; returns when they are.
    ///
    /// Concurrent callers share blocks: the first caller that finds no write in progress
    /// becomes the leader and writes the records of every waiting caller as one block,
    /// with one write and one flush; the others wait and return when a block holding
    /// their records is durable. An empty `records` waits until every earlier commit is
    /// durable (a barrier) and writes nothing itself.
    ///
    /// Errors: [`LogError::Full`], [`LogError::TooLarge`], [`LogError::InvalidRecord`] (TXG
    /// 0, a TXG or offset above 2^62) and [`LogError::CounterExhausted`] (a counter so near
    /// the end of its range that the record might not be replayable) before anything is
    /// written (the log stays usable); [`LogError::Io`] when this caller's write or flush failed,
    /// and [`LogError::Poisoned`] for every commit after that, or whose records were in
    /// the failed block.
    pub fn commit(&self, records: &[RecordRef<'_>]) -> Result<CommitInfo, LogError> {
        let started = Instant::now();
        let entry = self.encode(records)?;
        let mut st = self.lock();
        if let Some(err) = st.poisoned_error() {
            return Err(err);
        }
        let ticket = match entry {
            Some(pending) => {
                st.check_counter_room(self.epoch)?;
                let free_bytes = st.free_bytes(self.geometry.ring_bytes());
                if pending.reserve_bytes > free_bytes {
                    st.counters.full_errors += 1;
                    return Err(LogError::Full {
                        needed_bytes: pending.reserve_bytes,
                        free_bytes,
                    });
                }
                let ticket = st.next_ticket;
                st.next_ticket += 1;
                st.reserved_bytes += pending.reserve_bytes;
                st.queue.push(ticket, pending);
                Some(ticket)
            }
            None => None,
        };
        let wait_for = ticket.unwrap_or(st.next_ticket - 1);
        st = self.wait_done(st, wait_for, &mut Led::default())?;
        let Some(ticket) = ticket else {
            return Ok(CommitInfo {
                block_sequence: st.next_sequence.saturating_sub(1),
                group_commits: 0,
                group_records: 0,
            });
        };
        let info = st.take_info(ticket);
        let c = &mut st.counters;
        c.commits += 1;
        c.commit_us += started.elapsed().as_micros() as u64;
        Ok(info)
    }

    /// Queues a write's record for a later [`LogDevice::commit_through`], which may never
    /// come (its TXG may be committed first, and the record then leaves the queue: see
    /// [`LogDevice::forget_through`]). Records are logged in the order of the appends, so
    /// a caller that appends under the lock that orders its writes gets them replayed in
    /// that order. Nothing is encoded or written here: the call is cheap enough to make
    /// under such a lock. A record longer than [`LogDevice::max_record_data_bytes`] is
    /// queued as several. A record for the same place, TXG and length as one still queued
    /// replaces that one's bytes (see the `queue` module). Returns the ticket to commit
    /// through.
    ///
    /// Errors: [`LogError::InvalidRecord`] for TXG 0 or a TXG or offset above 2^62,
    /// [`LogError::CounterExhausted`] (see [`LogDevice::commit`]), [`LogError::Poisoned`].
    pub fn append(&self, record: QueuedRecord) -> Result<u64, LogError> {
        check_record(record.txg, record.offset_bytes)?;
        let max = (self.max_record_data_bytes() as usize)
            .min(larch_format::zil::ZIL_RECORD_MAX_DATA_BYTES as usize)
            .max(1);
        let mut st = self.lock();
        if let Some(err) = st.poisoned_error() {
            return Err(err);
        }
        st.check_counter_room(self.epoch)?;
        let State {
            queue, next_ticket, ..
        } = &mut *st;
        if record.data.len() <= max {
            return Ok(queue.append(record, next_ticket));
        }
        let mut ticket = 0;
        for start in (0..record.data.len()).step_by(max) {
            let end = (start + max).min(record.data.len());
            let piece = QueuedRecord {
                offset_bytes: record.offset_bytes + start as u64,
                data: record.data.slice(start..end),
                ..record
            };
            ticket = queue.append(piece, next_ticket);
        }
        Ok(ticket)
    }

    /// Makes every record up to `ticket` durable ([`LogDevice::append`]'s tickets;
    /// commit calls' too): in the log, or, for appended records whose TXGs were
    /// committed meanwhile, on the backing stores. Group commit as in
    /// [`LogDevice::commit`]: the caller leads if no block is being written, writing the
    /// oldest queued records (everyone's) a block at a time, or waits for the leader.
    /// Returns what this caller wrote as the leader.
    ///
    /// Errors: [`LogError::Unlogged`] when the log had no room for some of the appended
    /// records (they are durable once the TXG it names is committed; the log stays
    /// usable); [`LogError::Io`] and [`LogError::Poisoned`] as for a commit.
    pub fn commit_through(&self, ticket: u64) -> Result<Led, LogError> {
        let started = Instant::now();
        let mut led = Led::default();
        let mut st = self.wait_done(self.lock(), ticket, &mut led)?;
        if let Some(txg) = st.queue.unlogged_through(ticket) {
            return Err(LogError::Unlogged { txg });
        }
        if led.blocks > 0 {
            let c = &mut st.counters;
            c.commits += 1;
            c.commit_us += started.elapsed().as_micros() as u64;
        }
        Ok(led)
    }

    /// [`LogDevice::commit_through`] the newest ticket: every record queued so far (a
    /// FLUSH).
    pub fn commit_all(&self) -> Result<Led, LogError> {
        let newest = self.lock().next_ticket - 1;
        self.commit_through(newest)
    }

    /// Tells the log that the backing stores hold every write of TXGs ≤ `txg`, before
    /// [`LogDevice::txg_committed`] can say so durably: queued appended records of those
    /// TXGs leave the queue unwritten (their commits return at once). Writes nothing.
    pub fn forget_through(&self, txg: u64) {
        let mut st = self.lock();
        st.queue.forget_through(txg);
        st.settle();
        drop(st);
        self.wake.notify_all();
    }

    /// Records waiting for a leader (appended records and commit calls).
    pub fn queued(&self) -> u64 {
        self.lock().queue.len() as u64
    }

    /// Waits until every ticket up to `ticket` is done, leading rounds while no one else
    /// does; what this caller wrote is added to `led`.
    fn wait_done<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        ticket: u64,
        led: &mut Led,
    ) -> Result<MutexGuard<'a, State>, LogError> {
        while st.done_ticket < ticket {
            if let Some(err) = st.poisoned_error() {
                return Err(err);
            }
            st = if st.leading {
                self.wake.wait(st).expect("log state lock")
            } else {
                self.lead(st, led)?
            };
        }
        Ok(st)
    }

    /// Validates and encodes one commit's records outside the lock, so concurrent
    /// callers checksum and copy in parallel.
    fn encode(&self, records: &[RecordRef<'_>]) -> Result<Option<Pending>, LogError> {
        if records.is_empty() {
            return Ok(None);
        }
        for r in records {
            check_record(r.txg, r.offset_bytes)?;
        }
        let bytes = records
            .iter()
            .map(|r| ZilRecordPhys::encoded_bytes(r.data.len()) as u64)
            .fold(0u64, u64::saturating_add);
        if bytes > self.max_body_bytes {
            return Err(LogError::TooLarge {
                bytes,
                max_bytes: self.max_body_bytes,
            });
        }
        let mut body = Vec::with_capacity(bytes as usize);
        for r in records {
            ZilRecordPhys::append_write(&mut body, r.txg, r.volume_id, r.offset_bytes, r.data);
        }
        debug_assert_eq!(body.len() as u64, bytes);
        Ok(Some(Pending::encoded(
            body,
            records.len() as u32,
            records.iter().map(|r| r.data.len() as u64).sum(),
            records.iter().map(|r| r.txg).max().unwrap_or(0),
            self.geometry.asize(ZilBlockPhys::SIZE as u64 + bytes),
        )))
    }

    /// Takes the oldest queued entries that fit one block and the ring: a commit call's
    /// fit always (its room is reserved), an appended record if the ring has room for it
    /// beyond every reservation. When the oldest entry is an appended record without room,
    /// every appended record fails (see the `queue` module) and nothing is taken.
    fn take_block(&self, st: &mut State) -> Vec<Pending> {
        let ring_bytes = self.geometry.ring_bytes();
        let mut taken: Vec<Pending> = Vec::new();
        let mut body_bytes = 0u64;
        let mut reserved = 0u64;
        while let Some(front) = st.queue.front() {
            let next = body_bytes + front.body_bytes();
            if !taken.is_empty() && next > self.max_body_bytes {
                break;
            }
            if front.reserve_bytes == 0 {
                let asize = self.geometry.asize(ZilBlockPhys::SIZE as u64 + next);
                let room = (st.durable_tail_pos + ring_bytes)
                    .saturating_sub(st.head_pos + st.reserved_bytes - reserved);
                if asize > room {
                    if taken.is_empty() {
                        st.counters.full_errors += st.queue.fail_appended();
                        st.settle();
                    }
                    break;
                }
            }
            reserved += front.reserve_bytes;
            body_bytes = next;
            taken.extend(st.queue.pop_front());
        }
        taken
    }

    /// One round as the leader: takes the oldest queued entries that fit one block
    /// ([`LogDevice::take_block`]), writes and flushes the block without the lock, and
    /// wakes everyone. What it wrote is added to `led`.
    fn lead<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        led: &mut Led,
    ) -> Result<MutexGuard<'a, State>, LogError> {
        let taken = self.take_block(&mut st);
        let Some(first) = taken.first() else {
            // Nothing had room: the appended records failed, their waiters are told.
            self.wake.notify_all();
            return Ok(st);
        };
        let body_bytes: u64 = taken.iter().map(Pending::body_bytes).sum();
        let asize = self.geometry.asize(ZilBlockPhys::SIZE as u64 + body_bytes);
        let reserved: u64 = taken.iter().map(|p| p.reserve_bytes).sum();
        assert!(
            st.head_pos + asize + (st.reserved_bytes - reserved)
                <= st.durable_tail_pos + self.geometry.ring_bytes(),
            "block of {asize} bytes at {} overruns the tail {} (reserved {reserved} of {})",
            st.head_pos,
            st.durable_tail_pos,
            st.reserved_bytes
        );
        let head = ZilBlockPhys {
            record_count: taken.iter().map(Pending::records).sum(),
            pool_guid: self.pool_guid,
            device_guid: self.device_guid,
            sequence: st.next_sequence,
            epoch: self.epoch,
            pos: st.head_pos,
            prev_checksum: st.last_checksum,
            committed_txg: st.committed_txg,
            body_bytes: body_bytes as u32,
            body_checksum: 0,
        };
        st.leading = true;
        st.writing_from = first.ticket;
        st.head_pos += asize;
        st.next_sequence += 1;
        st.reserved_bytes -= reserved;
        st.blocks.push_back(LiveBlock {
            pos: head.pos,
            sequence: head.sequence,
            prev_checksum: head.prev_checksum,
            max_txg: taken.iter().map(|p| p.max_txg).max().unwrap_or(0),
            durable: false,
        });
        drop(st);

        // New commits queue up while this block is written: they form the next group.
        let mut buf = AlignedBuf::zeroed(asize as usize);
        let body_end = ZilBlockPhys::SIZE + body_bytes as usize;
        let mut at = ZilBlockPhys::SIZE;
        for p in &taken {
            let len = p.body_bytes() as usize;
            p.write_body(&mut buf[at..at + len]);
            at += len;
        }
        let head = ZilBlockPhys {
            body_checksum: checksum(&buf[ZilBlockPhys::SIZE..body_end]),
            ..head
        };
        buf[..ZilBlockPhys::SIZE].copy_from_slice(&head.encode());
        let write_started = Instant::now();
        let written = self.write_ring(head.pos, &buf);
        let write_us = write_started.elapsed().as_micros() as u64;
        let flush_started = Instant::now();
        let flushed = written.and_then(|()| self.dev.flush());
        let flush_us = flush_started.elapsed().as_micros() as u64;

        let mut st = self.lock();
        st.leading = false;
        self.wake.notify_all();
        if let Err(err) = flushed {
            st.poison(format!("writing log block {}: {err}", head.sequence));
            return Err(LogError::Io(err));
        }
        st.last_checksum = head.head_checksum();
        let block = st
            .blocks
            .iter_mut()
            .rev()
            .find(|b| b.sequence == head.sequence)
            .unwrap_or_else(|| {
                panic!(
                    "block {} left the list before it was durable",
                    head.sequence
                )
            });
        block.durable = true;
        st.settle();
        st.note_block(&head, &taken, asize, (write_us, flush_us), led);
        Ok(st)
    }

    /// Writes a block buffer at ring position `pos`: one write, or two at the ring end.
    fn write_ring(&self, pos: u64, buf: &[u8]) -> Result<(), IoError> {
        let mut done = 0usize;
        for (offset, len) in self.geometry.pieces(pos, buf.len() as u64) {
            if len > 0 {
                let len = len as usize;
                self.dev.write_at(&buf[done..done + len], offset)?;
                done += len;
            }
        }
        Ok(())
    }

    /// Tells the log that the backing stores hold, durably, every write of TXGs ≤ `txg`.
    ///
    /// Call it only after the backing stores are flushed. It raises the committed TXG
    /// (never lowers it), reclaims the blocks from the tail whose records are all of
    /// TXGs ≤ it, and makes the new header durable before returning; the freed space is
    /// available to commits from then on. A call that changes nothing writes nothing.
    /// A failed header write poisons the log.
    pub fn txg_committed(&self, txg: u64) -> Result<(), LogError> {
        let mut hs = self.header.lock().expect("log header lock");
        let header = {
            let mut st = self.lock();
            if let Some(err) = st.poisoned_error() {
                return Err(err);
            }
            // No record has a TXG above ZIL_COUNTER_MAX (`check_record`), so a higher
            // `txg` commits the same records, and the header can say so.
            st.committed_txg = st.committed_txg.max(txg.min(ZIL_COUNTER_MAX));
            st.reclaim();
            let committed = st.committed_txg;
            st.queue.forget_through(committed);
            st.settle();
            self.wake.notify_all();
            let (tail_pos, tail_sequence, tail_prev_checksum) = st.tail();
            let last = hs.last;
            if last.committed_txg == st.committed_txg && last.tail_pos == tail_pos {
                return Ok(());
            }
            ZilHeaderPhys {
                sequence: last.sequence + 1,
                committed_txg: st.committed_txg,
                tail_pos,
                tail_sequence,
                tail_prev_checksum,
                ..last
            }
        };
        if let Err(err) = self.write_header(&header) {
            let mut st = self.lock();
            st.poison(format!("writing the log header: {err}"));
            self.wake.notify_all();
            return Err(err);
        }
        hs.last = header;
        let mut st = self.lock();
        st.durable_tail_pos = st.durable_tail_pos.max(header.tail_pos);
        st.header_sequence = header.sequence;
        Ok(())
    }

    /// Writes `header` into slot 0, flushes, then slot 1, flushes: after it returns both
    /// slots agree, and at every instant one of them holds a complete header.
    /// A header `open` would refuse is not written: the write fails with
    /// [`LogError::CounterExhausted`] instead.
    fn write_header(&self, header: &ZilHeaderPhys) -> Result<(), LogError> {
        walk::check_counters(header)?;
        let buf = AlignedBuf::from_slice_padded(&header.encode(), ZIL_HEADER_SLOT_BYTES as usize);
        for slot in 0..2 {
            self.dev.write_at(&buf, slot_offset(slot))?;
            self.dev.flush()?;
        }
        let mut st = self.lock();
        st.counters.header_writes += 1;
        st.counters.flushes += 2;
        Ok(())
    }

    /// Counters and space.
    pub fn stats(&self) -> LogStats {
        let st = self.lock();
        let c = &st.counters;
        let ring_bytes = self.geometry.ring_bytes();
        LogStats {
            zil_commit_count: c.commits,
            zil_commit_writer_count: c.blocks,
            zil_itx_count: c.records,
            zil_itx_copied_bytes: c.data_bytes,
            log_bytes_written: c.log_bytes,
            flushes: c.flushes,
            header_writes: c.header_writes,
            group_commits_max: c.group_max,
            group_size_hist: c.group_hist,
            full_errors: c.full_errors,
            queued_commits: st.queue.len() as u64,
            commit_latency_us_sum: c.commit_us,
            write_latency_us_sum: c.write_us,
            flush_latency_us_sum: c.flush_us,
            committed_txg: st.committed_txg,
            ring_bytes,
            used_bytes: st.head_pos - st.durable_tail_pos,
            reserved_bytes: st.reserved_bytes,
            free_bytes: st.free_bytes(ring_bytes),
            live_blocks: st.blocks.len() as u64,
            laps: st.head_pos / ring_bytes,
            poisoned: st.poison.is_some(),
        }
    }

    /// Whether an earlier failure poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.lock().poison.is_some()
    }

    /// The failure that poisoned the log, if any.
    pub fn poison_reason(&self) -> Option<Arc<str>> {
        self.lock().poison.clone()
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The pool this log belongs to.
    pub fn pool_guid(&self) -> u64 {
        self.pool_guid
    }

    /// This log device's guid.
    pub fn device_guid(&self) -> u64 {
        self.device_guid
    }

    /// The epoch of this open (1 after create, one more after each open).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The largest encoded size of one commit's records: the sum of
    /// [`crate::encoded_record_bytes`] over a commit's records must not exceed it (else
    /// [`LogError::TooLarge`]). Half the ring less a block head, at most 16 MiB.
    pub fn max_commit_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    /// The largest data of one record on this device (a commit of that record alone).
    pub fn max_record_data_bytes(&self) -> u64 {
        self.max_body_bytes - ZilRecordPhys::SIZE as u64
    }

    /// The underlying device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("log state lock")
    }
}

fn group_bucket(commits: u32) -> usize {
    match commits {
        0..=1 => 0,
        2 => 1,
        3..=4 => 2,
        5..=8 => 3,
        9..=16 => 4,
        _ => 5,
    }
}

/// A seed for the first block's `prev_checksum` that no earlier format of this device
/// (or any other) used: the guids, the time, the process and a counter, hashed.
fn chain_seed(pool_guid: u64, device_guid: u64) -> u64 {
    static CREATED: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut material = Vec::with_capacity(40);
    for value in [
        pool_guid,
        device_guid,
        nanos,
        u64::from(std::process::id()),
        CREATED.fetch_add(1, Ordering::Relaxed),
    ] {
        material.extend_from_slice(&value.to_le_bytes());
    }
    checksum(&material)
}

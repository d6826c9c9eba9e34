//! The pool's events: what happened to it and when, as `zpool events` lists a pool's —
//! cache devices faulted and back, L2ARC rebuilds, flips of the L2ARC switch, tunable and
//! property changes, log devices added and removed, volumes failed, stalled TXGs, the
//! leases of object-store volumes, and each open and close of the pool.
//!
//! Recording an event ([`Events::record`]) is a push onto a bounded queue in memory under
//! one leaf lock: no I/O, so any part may record from any thread, its own locks held (but
//! no leaf lock: see the crate's lock order). The newest [`EVENTS_KEPT`] are kept; an older
//! one leaves memory when a newer one arrives.
//!
//! The owner of the pool saves them ([`Events::save`]): the daemon once a second, and the
//! pool at its close. The file ([`EVENTS_FILE`] in the state directory) has one event per
//! line, `CHECKSUM JSON`, where CHECKSUM is the xxh3-64 of the JSON in 16 hex digits; new
//! events are appended, and once the file holds twice [`EVENTS_KEPT`] lines it is written
//! again, whole, with the events kept (a new file renamed over the old one). A line that
//! does not check out is skipped when the file is read and counted, never an error: a
//! daemon killed in the middle of an append leaves a torn last line, and the next open
//! writes the file again without it. A kill -9 loses the events of the last second at
//! most (those not saved yet).
//!
//! Each event carries a sequence number, one more than the event before it in this pool
//! across restarts, so a reader that follows the events (`larch events -f`) asks for those
//! after the last it saw.
//!
//! One file (about 790 lines of code and 320 of unit tests): the kinds, the log in memory
//! and its file are one format read and written in one place, and the tests open that file
//! as a torn append leaves it.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::lock::RankedMutex;

/// Name of the event file in the state directory.
pub const EVENTS_FILE: &str = "events";

/// Events kept, in memory and in the file once it is written again.
pub const EVENTS_KEPT: usize = 1000;

/// The longest text an event keeps of a reason (a fault's, a failure's); longer ones are
/// cut, so that an event's size, and the log's memory, is bounded.
pub const TEXT_MAX_BYTES: usize = 400;

/// Something that happened to the pool, and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Its number: one more than the event before it in this pool, across restarts.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Its `class` (in the JSON, and the second column of `larch events`) names
/// the kind, as `zpool events` names its classes; the other fields are the kind's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "class")]
pub enum EventKind {
    /// The pool was opened (the daemon started).
    #[serde(rename = "pool.open")]
    PoolOpened,
    /// The pool was closed (the daemon stopped cleanly).
    #[serde(rename = "pool.close")]
    PoolClosed,
    /// A cache device was added (`larch cache add`).
    #[serde(rename = "cache.add")]
    CacheDeviceAdded {
        /// Its path.
        device: String,
    },
    /// A cache device was removed (`larch cache remove`).
    #[serde(rename = "cache.remove")]
    CacheDeviceRemoved {
        /// Its path.
        device: String,
    },
    /// A cache device was taken out of use after an error.
    #[serde(rename = "cache.fault")]
    CacheDeviceFaulted {
        /// Its path.
        device: String,
        /// Why.
        why: String,
    },
    /// A faulted or missing cache device is in use again.
    #[serde(rename = "cache.online")]
    CacheDeviceOnline {
        /// Its path.
        device: String,
        /// How it came back.
        why: String,
    },
    /// A cache device's rebuild (its index, from its log) began.
    #[serde(rename = "l2arc.rebuild_start")]
    RebuildStarted {
        /// Its path.
        device: String,
    },
    /// A cache device's rebuild ended.
    #[serde(rename = "l2arc.rebuild_end")]
    RebuildEnded {
        /// Its path.
        device: String,
        /// Whether it walked the whole log.
        success: bool,
        /// Blocks restored (`l2_rebuild_bufs`).
        blocks: u64,
        /// Log blocks read (`l2_rebuild_log_blks`).
        log_blocks: u64,
        /// Failed reads and log blocks with a bad checksum.
        errors: u64,
        /// How long it took, in milliseconds.
        ms: u64,
    },
    /// The L2ARC switch (`l2arc_enabled`) was flipped.
    #[serde(rename = "l2arc.switch")]
    L2arcSwitch {
        /// Whether the L2ARC is on now.
        enabled: bool,
    },
    /// A tunable other than the switch changed (`larch set`, the page, `tunables.json`).
    #[serde(rename = "tunable.set")]
    TunableChanged {
        /// Its name.
        name: String,
        /// Its new value, as `larch get` prints it.
        value: String,
        /// Its value before.
        previous: String,
    },
    /// A property of a volume changed at run time (`larch set VOLUME PROP=VALUE`).
    #[serde(rename = "volume.property")]
    PropertyChanged {
        /// The volume.
        volume: String,
        /// The property (`sync`, `secondarycache`, ...).
        property: String,
        /// Its new value.
        value: String,
        /// Its value before.
        previous: String,
    },
    /// A volume failed: its backing store lost a TXG, its writes fail from now on.
    #[serde(rename = "volume.fail")]
    VolumeFailed {
        /// The volume.
        volume: String,
        /// Why.
        why: String,
    },
    /// The log device was added (`larch log add`).
    #[serde(rename = "log.add")]
    LogDeviceAdded {
        /// Its path.
        device: String,
    },
    /// The log device was removed (`larch log remove`).
    #[serde(rename = "log.remove")]
    LogDeviceRemoved {
        /// Its path.
        device: String,
    },
    /// The log device stopped taking records after an error (sync writes now wait for
    /// TXG syncs).
    #[serde(rename = "log.fault")]
    LogDeviceFaulted {
        /// Its path.
        device: String,
        /// Why.
        why: String,
    },
    /// Writes stalled: a TXG whose sync took longer than `zfs_txg_timeout`, or during
    /// which writers waited at the dirty limit (see [`StallWatch`] for the rule).
    #[serde(rename = "txg.stall")]
    TxgStall {
        /// The first TXG that stalled.
        txg: u64,
        /// How long its sync took, in milliseconds.
        sync_ms: u64,
        /// `zfs_txg_timeout` then, in seconds.
        timeout_s: u64,
        /// Writes that waited at the dirty limit since the TXG before it synced.
        blocked_writes: u64,
    },
    /// A stall ended: no TXG stalled for twice `zfs_txg_timeout`.
    #[serde(rename = "txg.stall_end")]
    TxgStallEnded {
        /// From the stall's first TXG's end to the last stalled TXG's, in milliseconds.
        ms: u64,
        /// TXGs that stalled.
        txgs: u64,
        /// Writes that waited at the dirty limit during the stall.
        blocked_writes: u64,
        /// The longest sync of the stall, in milliseconds.
        longest_sync_ms: u64,
    },
    /// This node took the lease of an object-store volume (at open).
    #[serde(rename = "lease.take")]
    LeaseTaken {
        /// The volume.
        volume: String,
        /// This node's fencing token.
        token: u64,
        /// Whether another node committed to the volume since this node's last run (a
        /// takeover: this node's cached copies of the volume are not trusted).
        takeover: bool,
    },
    /// Another node took an object-store volume: this node serves it no more.
    #[serde(rename = "lease.lost")]
    LeaseLost {
        /// The volume.
        volume: String,
        /// Why (which node, which token).
        why: String,
    },
    /// An object-store volume's lease ran out with no renewal answered: not served until
    /// one is.
    #[serde(rename = "lease.lapse")]
    LeaseLapsed {
        /// The volume.
        volume: String,
    },
    /// A renewal was answered after the lease had lapsed: the volume is served again.
    #[serde(rename = "lease.resume")]
    LeaseResumed {
        /// The volume.
        volume: String,
    },
    /// This node gave an object-store volume's lease up (a clean stop).
    #[serde(rename = "lease.release")]
    LeaseReleased {
        /// The volume.
        volume: String,
    },
}

/// Milliseconds as seconds with a tenth.
fn seconds(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

impl EventKind {
    /// The class, as the JSON's `class` spells it (`cache.fault`, `l2arc.switch`, ...).
    pub fn class(&self) -> &'static str {
        match self {
            EventKind::PoolOpened => "pool.open",
            EventKind::PoolClosed => "pool.close",
            EventKind::CacheDeviceAdded { .. } => "cache.add",
            EventKind::CacheDeviceRemoved { .. } => "cache.remove",
            EventKind::CacheDeviceFaulted { .. } => "cache.fault",
            EventKind::CacheDeviceOnline { .. } => "cache.online",
            EventKind::RebuildStarted { .. } => "l2arc.rebuild_start",
            EventKind::RebuildEnded { .. } => "l2arc.rebuild_end",
            EventKind::L2arcSwitch { .. } => "l2arc.switch",
            EventKind::TunableChanged { .. } => "tunable.set",
            EventKind::PropertyChanged { .. } => "volume.property",
            EventKind::VolumeFailed { .. } => "volume.fail",
            EventKind::LogDeviceAdded { .. } => "log.add",
            EventKind::LogDeviceRemoved { .. } => "log.remove",
            EventKind::LogDeviceFaulted { .. } => "log.fault",
            EventKind::TxgStall { .. } => "txg.stall",
            EventKind::TxgStallEnded { .. } => "txg.stall_end",
            EventKind::LeaseTaken { .. } => "lease.take",
            EventKind::LeaseLost { .. } => "lease.lost",
            EventKind::LeaseLapsed { .. } => "lease.lapse",
            EventKind::LeaseResumed { .. } => "lease.resume",
            EventKind::LeaseReleased { .. } => "lease.release",
        }
    }

    /// The kind with every reason cut to [`TEXT_MAX_BYTES`].
    fn capped(mut self) -> EventKind {
        match &mut self {
            EventKind::CacheDeviceFaulted { why, .. }
            | EventKind::CacheDeviceOnline { why, .. }
            | EventKind::VolumeFailed { why, .. }
            | EventKind::LogDeviceFaulted { why, .. }
            | EventKind::LeaseLost { why, .. } => cap(why),
            _ => {}
        }
        self
    }
}

/// Cuts `text` to at most [`TEXT_MAX_BYTES`] (at a character boundary), marking the cut.
fn cap(text: &mut String) {
    if text.len() <= TEXT_MAX_BYTES {
        return;
    }
    let mut end = TEXT_MAX_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

/// What `larch events` prints after the time and class: the event in words.
impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKind::PoolOpened => write!(f, "pool opened"),
            EventKind::PoolClosed => write!(f, "pool closed"),
            EventKind::CacheDeviceAdded { device } => write!(f, "cache device {device} added"),
            EventKind::CacheDeviceRemoved { device } => {
                write!(f, "cache device {device} removed")
            }
            EventKind::CacheDeviceFaulted { device, why } => {
                write!(f, "cache device {device} faulted: {why}")
            }
            EventKind::CacheDeviceOnline { device, why } => {
                write!(f, "cache device {device} back in use: {why}")
            }
            EventKind::RebuildStarted { device } => write!(f, "L2ARC rebuild of {device} began"),
            EventKind::RebuildEnded {
                device,
                success,
                blocks,
                log_blocks,
                errors,
                ms,
            } => {
                let how = if *success { "ended" } else { "stopped early" };
                write!(
                    f,
                    "L2ARC rebuild of {device} {how} after {} s: {blocks} blocks restored \
                     from {log_blocks} log blocks",
                    seconds(*ms)
                )?;
                if *errors > 0 {
                    write!(f, ", {errors} errors")?;
                }
                Ok(())
            }
            EventKind::L2arcSwitch { enabled } => {
                let (word, value) = if *enabled { ("on", 1) } else { ("off", 0) };
                write!(f, "L2ARC {word} (l2arc_enabled={value})")
            }
            EventKind::TunableChanged {
                name,
                value,
                previous,
            } => write!(f, "{name}={value} (was {previous})"),
            EventKind::PropertyChanged {
                volume,
                property,
                value,
                previous,
            } => write!(f, "volume {volume}: {property}={value} (was {previous})"),
            EventKind::VolumeFailed { volume, why } => write!(f, "volume {volume} failed: {why}"),
            EventKind::LogDeviceAdded { device } => write!(f, "log device {device} added"),
            EventKind::LogDeviceRemoved { device } => write!(f, "log device {device} removed"),
            EventKind::LogDeviceFaulted { device, why } => {
                write!(f, "log device {device} faulted: {why}")
            }
            EventKind::TxgStall {
                txg,
                sync_ms,
                timeout_s,
                blocked_writes,
            } => write!(
                f,
                "writes stalled at TXG {txg}: its sync took {} s (zfs_txg_timeout {timeout_s} s), \
                 {blocked_writes} writes waited at the dirty limit",
                seconds(*sync_ms)
            ),
            EventKind::TxgStallEnded {
                ms,
                txgs,
                blocked_writes,
                longest_sync_ms,
            } => write!(
                f,
                "write stall over after {} s: {txgs} TXGs stalled, {blocked_writes} writes \
                 waited at the dirty limit, longest sync {} s",
                seconds(*ms),
                seconds(*longest_sync_ms)
            ),
            EventKind::LeaseTaken {
                volume,
                token,
                takeover,
            } => {
                write!(f, "volume {volume}: lease taken (token {token})")?;
                if *takeover {
                    write!(f, ", over from another node that committed since")?;
                }
                Ok(())
            }
            EventKind::LeaseLost { volume, why } => write!(f, "volume {volume}: lease lost: {why}"),
            EventKind::LeaseLapsed { volume } => write!(
                f,
                "volume {volume}: lease lapsed (no renewal answered); not served until one is"
            ),
            EventKind::LeaseResumed { volume } => {
                write!(f, "volume {volume}: lease renewed again; served again")
            }
            EventKind::LeaseReleased { volume } => write!(f, "volume {volume}: lease released"),
        }
    }
}

/// Milliseconds since the Unix epoch now (0 before it: a clock set wrong).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// An event as one line of the file, newline included.
pub fn encode_line(event: &Event) -> String {
    let json = serde_json::to_string(event).expect("an event always serializes");
    let checksum = larch_format::checksum(json.as_bytes());
    format!("{checksum:016x} {json}\n")
}

/// The event of one line of the file (without its newline); `None` when the line does
/// not check out (torn, damaged, or of a kind this larch does not know).
pub fn decode_line(line: &str) -> Option<Event> {
    let (checksum, json) = line.split_once(' ')?;
    if checksum.len() != 16 {
        return None;
    }
    let checksum = u64::from_str_radix(checksum, 16).ok()?;
    if larch_format::checksum(json.as_bytes()) != checksum {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// What an event file held.
#[derive(Debug, Default)]
pub struct FileEvents {
    /// The events of the lines that checked out, by sequence number (at most one per
    /// number: the first line of a number wins).
    pub events: Vec<Event>,
    /// Lines that did not (torn, damaged, of an unknown kind).
    pub skipped: u64,
    /// Lines in the file.
    pub lines: u64,
    /// Whether the last line lacks its newline (an append cut short).
    pub torn: bool,
}

/// Reads the event file of `state_dir` (none: nothing).
pub fn read_file(state_dir: &Path) -> io::Result<FileEvents> {
    let bytes = match std::fs::read(state_dir.join(EVENTS_FILE)) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(FileEvents::default()),
        Err(err) => return Err(err),
    };
    Ok(parse_file(&bytes))
}

/// The events of a file's bytes (see [`read_file`]).
pub fn parse_file(bytes: &[u8]) -> FileEvents {
    let mut out = FileEvents {
        torn: !bytes.is_empty() && !bytes.ends_with(b"\n"),
        ..FileEvents::default()
    };
    for line in bytes.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        out.lines += 1;
        match std::str::from_utf8(line).ok().and_then(decode_line) {
            Some(event) => out.events.push(event),
            None => out.skipped += 1,
        }
    }
    out.events.sort_by_key(|e| e.seq);
    out.events.dedup_by_key(|e| e.seq);
    out
}

/// The log in memory.
#[derive(Debug, Default)]
struct Log {
    /// The newest events, oldest first, at most [`EVENTS_KEPT`].
    kept: VecDeque<Event>,
    /// The number the next event takes.
    next_seq: u64,
    /// The newest number in the file (events after it are to be saved).
    saved_through: u64,
    /// Where the log is saved, once it has a file.
    state_dir: Option<PathBuf>,
    /// Lines in the file.
    file_lines: u64,
    /// Whether the file must be written again whole before anything is appended: it has a
    /// torn or damaged line, or an append failed (and may have left part of a line).
    rewrite: bool,
    /// Bytes of the events kept (their JSON), for the stats.
    bytes: u64,
}

impl Log {
    fn push(&mut self, event: Event) {
        self.bytes += event_bytes(&event);
        self.kept.push_back(event);
        while self.kept.len() > EVENTS_KEPT {
            let old = self.kept.pop_front().expect("more than kept");
            self.bytes -= event_bytes(&old);
        }
    }
}

/// About what an event takes in memory: its JSON's length.
fn event_bytes(event: &Event) -> u64 {
    serde_json::to_string(event).map_or(0, |s| s.len() as u64)
}

/// The pool's event log (see the module documentation).
#[derive(Debug)]
pub struct Events {
    log: RankedMutex<Log>,
    /// Held by the one saving: the file is written outside the log's lock, and two saves
    /// must not write it at once. Outside the engine's ranks: taken with no other lock
    /// held, before the log's (a leaf).
    saving: Mutex<()>,
    /// Events recorded by this process.
    recorded: AtomicU64,
    /// Lines of the file skipped when it was read.
    skipped: AtomicU64,
}

impl Default for Events {
    fn default() -> Events {
        Events::new()
    }
}

impl Events {
    /// An empty log with no file.
    pub fn new() -> Events {
        Events {
            log: RankedMutex::leaf(Log {
                next_seq: 1,
                ..Log::default()
            }),
            saving: Mutex::new(()),
            recorded: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Records that `kind` happened now; returns the event's number. No I/O: the event
    /// reaches the file with the next [`Events::save`].
    ///
    /// This is the one call for every part and every front end that makes something
    /// happen to the pool: `pool.engine.events.record(EventKind::PropertyChanged { .. })`.
    pub fn record(&self, kind: EventKind) -> u64 {
        self.record_at(now_ms(), kind)
    }

    /// [`Events::record`] at `time_ms` (milliseconds since the epoch).
    pub fn record_at(&self, time_ms: u64, kind: EventKind) -> u64 {
        let kind = kind.capped();
        let mut log = self.log.lock();
        let seq = log.next_seq;
        log.next_seq += 1;
        log.push(Event { seq, time_ms, kind });
        self.recorded.fetch_add(1, Ordering::Relaxed);
        seq
    }

    /// The events kept whose number is above `after`, oldest first (`after` 0: all).
    pub fn since(&self, after: u64) -> Vec<Event> {
        let log = self.log.lock();
        let start = log.kept.partition_point(|e| e.seq <= after);
        log.kept.range(start..).cloned().collect()
    }

    /// The number of the newest event (0: none yet).
    pub fn newest_seq(&self) -> u64 {
        self.log.lock().next_seq - 1
    }

    /// Events kept in memory, and their bytes (their JSON).
    pub fn kept(&self) -> (u64, u64) {
        let log = self.log.lock();
        (log.kept.len() as u64, log.bytes)
    }

    /// Events recorded by this process.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Lines of the file that were skipped when it was read (torn, damaged, unknown).
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Reads the event file of `state_dir` into the log (its newest [`EVENTS_KEPT`], before
    /// any recorded here, which are numbered after them) and saves there from now on. A
    /// file with a line that does not check out, or with more lines than are kept, is
    /// written again with the events kept. Returns the lines skipped. An error (the file
    /// cannot be read or written) leaves the log without its history, saving there still.
    pub fn open_file(&self, state_dir: &Path) -> io::Result<u64> {
        let _saving = self.saving.lock().unwrap_or_else(|p| p.into_inner());
        let read = read_file(state_dir);
        let mut log = self.log.lock();
        log.state_dir = Some(state_dir.to_path_buf());
        let found = match read {
            Ok(found) => found,
            Err(err) => {
                // Written again whole at the next save: what is in it cannot be trusted
                // to end in a whole line.
                log.rewrite = true;
                return Err(err);
            }
        };
        self.skipped.fetch_add(found.skipped, Ordering::Relaxed);
        let newest_in_file = found.events.last().map_or(0, |e| e.seq);
        let recorded: Vec<Event> = log.kept.drain(..).collect();
        log.bytes = 0;
        let older = found.events.len().saturating_sub(EVENTS_KEPT);
        for event in found.events.into_iter().skip(older) {
            log.push(event);
        }
        // Events recorded before the file was read follow the file's.
        let mut seq = newest_in_file;
        for mut event in recorded {
            seq += 1;
            event.seq = seq;
            log.push(event);
        }
        log.next_seq = seq + 1;
        log.saved_through = newest_in_file;
        log.file_lines = found.lines;
        log.rewrite = found.skipped > 0 || found.torn || found.lines > EVENTS_KEPT as u64;
        Ok(found.skipped)
    }

    /// Writes the events recorded since the last save to the file (appended; the whole
    /// file written again when it holds twice [`EVENTS_KEPT`] lines or has a bad line).
    /// Nothing to do without a file ([`Events::open_file`]). On an error the events stay
    /// to be saved, and the next save writes the whole file.
    pub fn save(&self) -> io::Result<()> {
        let _saving = self.saving.lock().unwrap_or_else(|p| p.into_inner());
        let (dir, whole, text, through, lines) = {
            let log = self.log.lock();
            let Some(dir) = log.state_dir.clone() else {
                return Ok(());
            };
            let start = log.kept.partition_point(|e| e.seq <= log.saved_through);
            let new = log.kept.len() - start;
            if new == 0 && !log.rewrite {
                return Ok(());
            }
            let whole = log.rewrite || log.file_lines + new as u64 >= 2 * EVENTS_KEPT as u64;
            let from = if whole { 0 } else { start };
            let text: String = log.kept.range(from..).map(encode_line).collect();
            let through = log.kept.back().map_or(log.saved_through, |e| e.seq);
            (dir, whole, text, through, (log.kept.len() - from) as u64)
        };
        let written = if whole {
            crate::files::write_state_file(&dir, EVENTS_FILE, text.as_bytes())
        } else {
            append(&dir.join(EVENTS_FILE), text.as_bytes())
        };
        let mut log = self.log.lock();
        match written {
            Ok(()) => {
                log.saved_through = through;
                log.file_lines = if whole { lines } else { log.file_lines + lines };
                log.rewrite = false;
                Ok(())
            }
            Err(err) => {
                log.rewrite = true;
                Err(err)
            }
        }
    }
}

/// Appends `bytes` to the file at `path` (created if missing) in one write.
fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(bytes)
}

/// Records `kinds` in the event file of a pool that no process has open (the CLI's
/// changes to a stopped pool), numbered after the file's, and saves them.
pub fn record_in_file(state_dir: &Path, kinds: Vec<EventKind>) -> io::Result<()> {
    if kinds.is_empty() {
        return Ok(());
    }
    let events = Events::new();
    events.open_file(state_dir)?;
    for kind in kinds {
        events.record(kind);
    }
    events.save()
}

/// The rule of a TXG stall, applied by the syncer after each TXG sync: a TXG stalls when
/// its sync took longer than `zfs_txg_timeout` (the next TXG then waits behind it longer
/// than a TXG is meant to stay open), or when writers waited at the dirty limit
/// (`dmu_tx_dirty_over_max`: blocked until a sync freed room, not merely paced by the
/// throttle's delay) since the TXG before it synced. The first stalled TXG records a
/// [`EventKind::TxgStall`]; the stall ends, with an [`EventKind::TxgStallEnded`], once no
/// TXG has stalled for twice `zfs_txg_timeout`, whether TXGs synced meanwhile or not.
/// So a long overload is two events, not one per TXG.
#[derive(Debug, Default)]
pub struct StallWatch {
    /// The stall under way, if any.
    stall: Option<Stall>,
    /// `dmu_tx_dirty_over_max` at the last TXG's end.
    blocked_before: u64,
}

/// A stall under way.
#[derive(Debug)]
struct Stall {
    /// When its first and its last stalled TXG ended (ms, the watch's clock).
    first_ms: u64,
    last_ms: u64,
    txgs: u64,
    blocked_writes: u64,
    longest_sync_ms: u64,
}

impl StallWatch {
    /// A TXG ended at `now_ms` (any clock that only goes forward): `txg`, whose sync took
    /// `sync_ms`, with `zfs_txg_timeout` at `timeout_s` and `dmu_tx_dirty_over_max` at
    /// `blocked_total`. Returns the event to record, if any.
    pub fn txg_synced(
        &mut self,
        now_ms: u64,
        txg: u64,
        sync_ms: u64,
        timeout_s: u64,
        blocked_total: u64,
    ) -> Option<EventKind> {
        let blocked = blocked_total.saturating_sub(self.blocked_before);
        self.blocked_before = blocked_total;
        let stalled = sync_ms > timeout_s.saturating_mul(1000) || blocked > 0;
        if !stalled {
            return self.quiet(now_ms, timeout_s);
        }
        match &mut self.stall {
            Some(stall) => {
                stall.last_ms = now_ms;
                stall.txgs += 1;
                stall.blocked_writes += blocked;
                stall.longest_sync_ms = stall.longest_sync_ms.max(sync_ms);
                None
            }
            None => {
                self.stall = Some(Stall {
                    first_ms: now_ms,
                    last_ms: now_ms,
                    txgs: 1,
                    blocked_writes: blocked,
                    longest_sync_ms: sync_ms,
                });
                Some(EventKind::TxgStall {
                    txg,
                    sync_ms,
                    timeout_s,
                    blocked_writes: blocked,
                })
            }
        }
    }

    /// Time passed to `now_ms` with no TXG stalled: the end of the stall under way, once
    /// twice `zfs_txg_timeout` (`timeout_s`) passed since its last stalled TXG.
    pub fn quiet(&mut self, now_ms: u64, timeout_s: u64) -> Option<EventKind> {
        let stall = self.stall.as_ref()?;
        if now_ms.saturating_sub(stall.last_ms) < timeout_s.max(1).saturating_mul(2000) {
            return None;
        }
        let stall = self.stall.take().expect("looked at above");
        Some(EventKind::TxgStallEnded {
            ms: stall.last_ms - stall.first_ms,
            txgs: stall.txgs,
            blocked_writes: stall.blocked_writes,
            longest_sync_ms: stall.longest_sync_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("larch-events-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn tunable(n: u64) -> EventKind {
        EventKind::TunableChanged {
            name: "l2arc_write_max".into(),
            value: format!("{n}M"),
            previous: "8M".into(),
        }
    }

    /// One of each kind: the tests below go through all of them.
    fn every_kind() -> Vec<EventKind> {
        let device = || "/dev/nvme0n1p1".to_string();
        let volume = || "vol0".to_string();
        vec![
            EventKind::PoolOpened,
            EventKind::PoolClosed,
            EventKind::CacheDeviceAdded { device: device() },
            EventKind::CacheDeviceRemoved { device: device() },
            EventKind::CacheDeviceFaulted {
                device: device(),
                why: "feed write failed: EIO".into(),
            },
            EventKind::CacheDeviceOnline {
                device: device(),
                why: "back in use, empty".into(),
            },
            EventKind::RebuildStarted { device: device() },
            EventKind::RebuildEnded {
                device: device(),
                success: true,
                blocks: 1234,
                log_blocks: 5,
                errors: 0,
                ms: 2500,
            },
            EventKind::L2arcSwitch { enabled: false },
            tunable(64),
            EventKind::PropertyChanged {
                volume: volume(),
                property: "sync".into(),
                value: "always".into(),
                previous: "standard".into(),
            },
            EventKind::VolumeFailed {
                volume: volume(),
                why: "TXG 7: EIO".into(),
            },
            EventKind::LogDeviceAdded { device: device() },
            EventKind::LogDeviceRemoved { device: device() },
            EventKind::LogDeviceFaulted {
                device: device(),
                why: "commit failed".into(),
            },
            EventKind::TxgStall {
                txg: 9,
                sync_ms: 7200,
                timeout_s: 5,
                blocked_writes: 3,
            },
            EventKind::TxgStallEnded {
                ms: 30_000,
                txgs: 4,
                blocked_writes: 80,
                longest_sync_ms: 7200,
            },
            EventKind::LeaseTaken {
                volume: volume(),
                token: 4,
                takeover: true,
            },
            EventKind::LeaseLost {
                volume: volume(),
                why: "node b took it".into(),
            },
            EventKind::LeaseLapsed { volume: volume() },
            EventKind::LeaseResumed { volume: volume() },
            EventKind::LeaseReleased { volume: volume() },
        ]
    }

    #[test]
    fn every_kind_reads_back_as_written_and_names_its_class() {
        for (i, kind) in every_kind().into_iter().enumerate() {
            let event = Event {
                seq: i as u64 + 1,
                time_ms: 1_700_000_000_123,
                kind,
            };
            let line = encode_line(&event);
            assert!(line.ends_with('\n'), "{line}");
            let value: serde_json::Value = serde_json::from_str(line[17..].trim_end()).unwrap();
            assert_eq!(value["class"], event.kind.class(), "{line}");
            assert_eq!(value["seq"], event.seq);
            assert_eq!(decode_line(line.trim_end()), Some(event.clone()), "{line}");
            assert!(!event.kind.to_string().is_empty());
        }
    }

    #[test]
    fn the_words_of_an_event_say_what_happened() {
        let words = |kind: EventKind| kind.to_string();
        assert_eq!(
            words(EventKind::L2arcSwitch { enabled: false }),
            "L2ARC off (l2arc_enabled=0)"
        );
        assert_eq!(words(tunable(64)), "l2arc_write_max=64M (was 8M)");
        assert_eq!(
            words(every_kind().remove(7)),
            "L2ARC rebuild of /dev/nvme0n1p1 ended after 2.5 s: 1234 blocks restored from 5 \
             log blocks"
        );
        assert_eq!(
            words(EventKind::TxgStall {
                txg: 9,
                sync_ms: 7250,
                timeout_s: 5,
                blocked_writes: 0
            }),
            "writes stalled at TXG 9: its sync took 7.2 s (zfs_txg_timeout 5 s), 0 writes \
             waited at the dirty limit"
        );
    }

    #[test]
    fn damaged_lines_do_not_check_out() {
        let line = encode_line(&Event {
            seq: 1,
            time_ms: 5,
            kind: EventKind::PoolOpened,
        });
        let line = line.trim_end();
        assert!(decode_line(line).is_some());
        // Torn anywhere, a bit flipped, a checksum of the wrong length, nothing at all.
        for cut in 0..line.len() {
            assert_eq!(decode_line(&line[..cut]), None, "cut at {cut}");
        }
        let flipped = line.replace("\"seq\":1", "\"seq\":2");
        assert_eq!(decode_line(&flipped), None);
        assert_eq!(decode_line(&line[1..]), None);
        assert_eq!(decode_line(""), None);
        // A kind of a newer larch checks out but is not known: skipped too.
        let json = r#"{"seq":3,"time_ms":5,"class":"pool.explode"}"#;
        let foreign = format!("{:016x} {json}", larch_format::checksum(json.as_bytes()));
        assert_eq!(decode_line(&foreign), None);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_file_written_again() {
        let dir = dir("torn");
        let events = Events::new();
        events.open_file(&dir).unwrap();
        for n in 1..=3 {
            events.record(tunable(n));
        }
        events.save().unwrap();
        // A kill in the middle of the next append: half a line, no newline.
        let half = encode_line(&Event {
            seq: 4,
            time_ms: 9,
            kind: tunable(4),
        });
        append(&dir.join(EVENTS_FILE), &half.as_bytes()[..half.len() / 2]).unwrap();
        let found = read_file(&dir).unwrap();
        assert_eq!(
            (found.events.len(), found.skipped, found.torn),
            (3, 1, true)
        );

        let reopened = Events::new();
        assert_eq!(reopened.open_file(&dir).unwrap(), 1);
        assert_eq!(reopened.skipped(), 1);
        assert_eq!(reopened.newest_seq(), 3);
        // The next event follows the last whole one, and the save drops the torn line.
        assert_eq!(reopened.record(EventKind::PoolOpened), 4);
        reopened.save().unwrap();
        let found = read_file(&dir).unwrap();
        assert_eq!((found.skipped, found.torn, found.lines), (0, false, 4));
        let seqs: Vec<u64> = found.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(found.events[3].kind, EventKind::PoolOpened);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn memory_and_file_keep_the_newest_events_only() {
        let dir = dir("bound");
        let events = Events::new();
        events.open_file(&dir).unwrap();
        let total = 3 * EVENTS_KEPT as u64 + 7;
        for n in 1..=total {
            events.record(tunable(n));
            // Saved now and then, as the daemon does: the file grows by appends and is
            // written again whenever it reaches twice what is kept.
            if n % 97 == 0 {
                events.save().unwrap();
                let lines = read_file(&dir).unwrap().lines;
                assert!(lines < 2 * EVENTS_KEPT as u64, "{lines} lines after {n}");
            }
        }
        events.save().unwrap();
        let (kept, bytes) = events.kept();
        assert_eq!(kept, EVENTS_KEPT as u64);
        assert!(bytes > 0 && bytes < EVENTS_KEPT as u64 * 200, "{bytes}");
        let all = events.since(0);
        assert_eq!(all.len(), EVENTS_KEPT);
        assert_eq!(all[0].seq, total - EVENTS_KEPT as u64 + 1);
        assert_eq!(all.last().unwrap().seq, total);
        assert_eq!(events.since(total - 2).len(), 2);
        assert!(events.since(total).is_empty());

        // What a restart finds: the newest events, numbered on.
        let reopened = Events::new();
        reopened.open_file(&dir).unwrap();
        assert_eq!(reopened.since(0).len(), EVENTS_KEPT);
        assert_eq!(reopened.newest_seq(), total);
        assert_eq!(reopened.record(EventKind::PoolOpened), total + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_reasons_are_cut() {
        let events = Events::new();
        let why = "é".repeat(TEXT_MAX_BYTES);
        events.record(EventKind::VolumeFailed {
            volume: "v".into(),
            why,
        });
        let EventKind::VolumeFailed { why, .. } = &events.since(0)[0].kind else {
            panic!("not the event recorded");
        };
        assert!(
            why.len() <= TEXT_MAX_BYTES && why.ends_with('…'),
            "{}",
            why.len()
        );
    }

    #[test]
    fn events_recorded_before_the_file_is_read_follow_its_events() {
        let dir = dir("before");
        record_in_file(&dir, vec![tunable(1), tunable(2)]).unwrap();
        let events = Events::new();
        events.record(EventKind::PoolOpened);
        events.open_file(&dir).unwrap();
        let seqs: Vec<(u64, &str)> = events
            .since(0)
            .iter()
            .map(|e| (e.seq, e.kind.class()))
            .collect();
        assert_eq!(
            seqs,
            [(1, "tunable.set"), (2, "tunable.set"), (3, "pool.open")]
        );
        events.save().unwrap();
        assert_eq!(read_file(&dir).unwrap().events.len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_file_keeps_its_events_to_save() {
        let dir = dir("unwritable");
        let events = Events::new();
        events.open_file(&dir).unwrap();
        events.record(EventKind::PoolOpened);
        // A directory where the file should be: appends and renames fail.
        std::fs::create_dir(dir.join(EVENTS_FILE)).unwrap();
        assert!(events.save().is_err());
        std::fs::remove_dir(dir.join(EVENTS_FILE)).unwrap();
        events.record(EventKind::PoolClosed);
        events.save().unwrap();
        let found = read_file(&dir).unwrap();
        let classes: Vec<&str> = found.events.iter().map(|e| e.kind.class()).collect();
        assert_eq!(classes, ["pool.open", "pool.close"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stall_is_one_event_at_its_start_and_one_at_its_end() {
        let mut watch = StallWatch::default();
        // Calm TXGs: nothing.
        assert_eq!(watch.txg_synced(1_000, 1, 300, 5, 0), None);
        assert_eq!(watch.quiet(60_000, 5), None);
        // A slow sync starts a stall.
        let start = watch.txg_synced(70_000, 2, 6_100, 5, 0);
        assert_eq!(
            start,
            Some(EventKind::TxgStall {
                txg: 2,
                sync_ms: 6_100,
                timeout_s: 5,
                blocked_writes: 0
            })
        );
        // Writers blocked at the limit during the next ones: the same stall.
        assert_eq!(watch.txg_synced(71_000, 3, 900, 5, 12), None);
        assert_eq!(watch.txg_synced(72_000, 4, 800, 5, 20), None);
        // A calm TXG, then quiet: over once 10 s passed since the last stalled TXG.
        assert_eq!(watch.txg_synced(75_000, 5, 100, 5, 20), None);
        assert_eq!(watch.quiet(81_999, 5), None);
        assert_eq!(
            watch.quiet(82_000, 5),
            Some(EventKind::TxgStallEnded {
                ms: 2_000,
                txgs: 3,
                blocked_writes: 20,
                longest_sync_ms: 6_100
            })
        );
        assert_eq!(watch.quiet(90_000, 5), None);
        // A sync just at the timeout is not a stall; one ms over is.
        assert_eq!(watch.txg_synced(91_000, 6, 5_000, 5, 20), None);
        assert!(watch.txg_synced(92_000, 7, 5_001, 5, 20).is_some());
    }
}

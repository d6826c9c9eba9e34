//! What waits for a leader: commit calls' records and appended records, in ticket order.
//!
//! Two kinds of callers queue records. A [`LogDevice::commit`] call hands over its records
//! and waits: they are encoded by the caller, outside the lock, and ring space for them is
//! reserved at the call, so a full log refuses them at once. An *appended* record
//! ([`LogDevice::append`]) is a write whose durability may be asked for later, or never
//! (its TXG may reach the backing stores first): it is queued as it is, in the order of
//! the appends, and a leader encodes it straight into its block. No ring space is held for
//! it; a leader that finds no room for the oldest one fails every appended record queued
//! (they are *unlogged*: durable once their TXGs are committed, which frees the room).
//!
//! An appended record for the same place (volume and offset), TXG and length as one still
//! queued takes that one's place and ticket: replay applies records in log order, so the
//! newest bytes at the older place end the same, and the superseded bytes are let go (a
//! block rewritten a million times between two FLUSHes would otherwise be kept a million
//! times).
//!
//! [`LogDevice::commit`]: crate::LogDevice::commit
//! [`LogDevice::append`]: crate::LogDevice::append

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use larch_format::checksum;
use larch_format::zil::{ZilRecordKind, ZilRecordPhys};

/// A write to log, owned: what [`crate::LogDevice::append`] queues.
#[derive(Clone, PartialEq, Eq)]
pub struct QueuedRecord {
    /// The TXG the write belongs to (at least 1).
    pub txg: u64,
    /// The volume written.
    pub volume_id: u64,
    /// Byte offset in the volume.
    pub offset_bytes: u64,
    /// The bytes written.
    pub data: Bytes,
}

impl std::fmt::Debug for QueuedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedRecord")
            .field("txg", &self.txg)
            .field("volume_id", &self.volume_id)
            .field("offset_bytes", &self.offset_bytes)
            .field("len", &self.data.len())
            .finish()
    }
}

/// A queued entry's records.
pub(crate) enum Body {
    /// A commit call's records, encoded.
    Encoded { bytes: Vec<u8>, records: u32 },
    /// One appended record, encoded when a leader writes it.
    Appended(QueuedRecord),
}

/// One ticket's records, waiting for a leader.
pub(crate) struct Pending {
    pub(crate) ticket: u64,
    pub(crate) body: Body,
    pub(crate) data_bytes: u64,
    pub(crate) max_txg: u64,
    /// Ring bytes held for a commit call: what it would take as a block of its own, an
    /// upper bound of what it adds to any shared block. 0 for an appended record.
    pub(crate) reserve_bytes: u64,
}

impl Pending {
    /// A commit call's encoded records.
    pub(crate) fn encoded(
        bytes: Vec<u8>,
        records: u32,
        data_bytes: u64,
        max_txg: u64,
        reserve_bytes: u64,
    ) -> Pending {
        Pending {
            ticket: 0,
            body: Body::Encoded { bytes, records },
            data_bytes,
            max_txg,
            reserve_bytes,
        }
    }

    /// Bytes it takes in a block body.
    pub(crate) fn body_bytes(&self) -> u64 {
        match &self.body {
            Body::Encoded { bytes, .. } => bytes.len() as u64,
            Body::Appended(r) => ZilRecordPhys::encoded_bytes(r.data.len()) as u64,
        }
    }

    pub(crate) fn records(&self) -> u32 {
        match &self.body {
            Body::Encoded { records, .. } => *records,
            Body::Appended(_) => 1,
        }
    }

    pub(crate) fn is_appended(&self) -> bool {
        matches!(self.body, Body::Appended(_))
    }

    /// Writes its body into `out`, which is [`Pending::body_bytes`] long and zeroed (the
    /// record's padding stays zero).
    pub(crate) fn write_body(&self, out: &mut [u8]) {
        match &self.body {
            Body::Encoded { bytes, .. } => out.copy_from_slice(bytes),
            Body::Appended(r) => {
                let head = ZilRecordPhys {
                    kind: ZilRecordKind::Write,
                    txg: r.txg,
                    volume_id: r.volume_id,
                    offset_bytes: r.offset_bytes,
                    length: r.data.len() as u32,
                    data_checksum: checksum(&r.data),
                };
                out[..ZilRecordPhys::SIZE].copy_from_slice(&head.encode());
                out[ZilRecordPhys::SIZE..ZilRecordPhys::SIZE + r.data.len()]
                    .copy_from_slice(&r.data);
            }
        }
    }
}

/// Appended records a leader could not log, from `first_ticket` on: a commit through a
/// ticket at or after it is not durable until TXG `txg` is committed.
struct Unlogged {
    first_ticket: u64,
    txg: u64,
}

/// The queue, oldest ticket first.
#[derive(Default)]
pub(crate) struct Queue {
    entries: VecDeque<Pending>,
    /// The ticket of each place's newest queued appended record: (volume, offset).
    places: HashMap<(u64, u64), u64>,
    unlogged: Vec<Unlogged>,
    /// TXGs up to this one are on the backing stores: their records need no logging.
    stable_txg: u64,
}

impl Queue {
    /// Queues a commit call's records under `ticket`.
    pub(crate) fn push(&mut self, ticket: u64, mut pending: Pending) {
        pending.ticket = ticket;
        self.entries.push_back(pending);
    }

    /// Queues an appended record, or puts its bytes in its place's queued record of the
    /// same TXG and length. Returns the ticket that covers it; `next_ticket` moves on if
    /// a new one was used.
    pub(crate) fn append(&mut self, record: QueuedRecord, next_ticket: &mut u64) -> u64 {
        let place = (record.volume_id, record.offset_bytes);
        if let Some(&ticket) = self.places.get(&place)
            && let Some(at) = self.position(ticket)
            && let Body::Appended(older) = &mut self.entries[at].body
            && older.txg == record.txg
            && older.data.len() == record.data.len()
        {
            older.data = record.data;
            return ticket;
        }
        let ticket = *next_ticket;
        *next_ticket += 1;
        self.places.insert(place, ticket);
        self.entries.push_back(Pending {
            ticket,
            data_bytes: record.data.len() as u64,
            max_txg: record.txg,
            reserve_bytes: 0,
            body: Body::Appended(record),
        });
        ticket
    }

    fn position(&self, ticket: u64) -> Option<usize> {
        self.entries
            .binary_search_by_key(&ticket, |p| p.ticket)
            .ok()
    }

    pub(crate) fn front(&self) -> Option<&Pending> {
        self.entries.front()
    }

    pub(crate) fn pop_front(&mut self) -> Option<Pending> {
        let pending = self.entries.pop_front()?;
        self.forget_place(&pending);
        Some(pending)
    }

    fn forget_place(&mut self, pending: &Pending) {
        if let Body::Appended(r) = &pending.body {
            let place = (r.volume_id, r.offset_bytes);
            if self.places.get(&place) == Some(&pending.ticket) {
                self.places.remove(&place);
            }
        }
    }

    /// The oldest queued ticket.
    pub(crate) fn first_ticket(&self) -> Option<u64> {
        self.entries.front().map(|p| p.ticket)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// TXGs up to `txg` are on the backing stores: their appended records leave the
    /// queue, and records not logged of those TXGs no longer matter.
    pub(crate) fn forget_through(&mut self, txg: u64) {
        if txg <= self.stable_txg {
            return;
        }
        self.stable_txg = txg;
        self.unlogged.retain(|u| u.txg > txg);
        let (keep, gone): (VecDeque<Pending>, VecDeque<Pending>) =
            std::mem::take(&mut self.entries)
                .into_iter()
                .partition(|p| !p.is_appended() || p.max_txg > txg);
        self.entries = keep;
        for pending in &gone {
            self.forget_place(pending);
        }
    }

    /// A leader found no room for the oldest appended record: every appended record
    /// queued leaves the queue unlogged. Returns how many.
    pub(crate) fn fail_appended(&mut self) -> u64 {
        let (keep, failed): (VecDeque<Pending>, VecDeque<Pending>) =
            std::mem::take(&mut self.entries)
                .into_iter()
                .partition(|p| !p.is_appended());
        self.entries = keep;
        if let Some(first) = failed.front() {
            let txg = failed.iter().map(|p| p.max_txg).max().unwrap_or(0);
            if txg > self.stable_txg {
                self.unlogged.push(Unlogged {
                    first_ticket: first.ticket,
                    txg,
                });
            }
        }
        for pending in &failed {
            self.forget_place(pending);
        }
        failed.len() as u64
    }

    /// The TXG that must be committed before every record up to `ticket` is durable,
    /// if some of them could not be logged.
    pub(crate) fn unlogged_through(&self, ticket: u64) -> Option<u64> {
        self.unlogged
            .iter()
            .filter(|u| u.first_ticket <= ticket)
            .map(|u| u.txg)
            .max()
    }
}

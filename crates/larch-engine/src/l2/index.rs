//! The compact index of blocks on cache devices: 20 bytes per block plus a 4-byte hash
//! slot, with no ARC header behind it.
//!
//! OpenZFS keeps an `l2c_only` header of ~96 bytes (plus its hash-table pointer) for every
//! block that lives only on a cache device, and that header is what limits the size of an
//! L2ARC (seed 000: 15 GB of DRAM for 600 GB of 8K blocks). larch keeps blocks that are
//! only on a cache device out of the ARC policy entirely; what remains of them is one
//! [`Entry`] here:
//!
//! | field      | bits | what                                                        |
//! |------------|------|-------------------------------------------------------------|
//! | `checksum` | 64   | xxh3-64 of the record, checked on every read                |
//! | `key`      | 56   | volume slot (12) and block number (44)                      |
//! | `pos`      | 34   | ring position in sectors, modulo 2^34                       |
//! | `flags`    | 6    | read, MFU, prefetch, metadata, bad, dead                    |
//!
//! The record's size is not stored: a record is always one whole block of its volume, so
//! the engine knows its size from the volume (the last block of a volume may be short).
//!
//! Entries sit in a chunked double-ended queue **in ring order**, one queue per cache
//! device and engine shard. The ring writes records at increasing positions and the evict
//! hand passes them in the same order, so eviction pops entries off the front: no list
//! pointers and no per-record state in the ring writer. A hash table of 32-bit sequence
//! numbers (the entry's place in the queue) finds a block by key. An entry whose block was
//! overwritten is marked dead in place and leaves the table; its 20 bytes are reclaimed
//! when the evict hand passes it. A copy that failed verification is marked bad: it is
//! never read again, but stays in the table so that a later overwrite of the block still
//! writes a tombstone for it (a transient read error must not let a restart restore a copy
//! that was superseded meanwhile).
//!
//! The full ring position of an entry is rebuilt from its 34 low bits and the newest
//! entry's position, which is exact while the queue spans less than 2^33 sectors (32 TiB
//! of 4K sectors, 4 TiB of 512-byte sectors); [`DeviceIndex::new`] refuses larger rings.
//!
//! Blocks that are both in the ARC and on a cache device have an entry here too (the ARC
//! header says nothing about the L2 copy).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use crate::stats::EngineStats;

/// Entries per chunk of the queue (24 KiB).
const CHUNK: usize = 1024;

const POS_BITS: u32 = 34;
const POS_MASK: u64 = (1 << POS_BITS) - 1;
const FLAG_BITS: u32 = 6;
const FLAG_MASK: u64 = (1 << FLAG_BITS) - 1;
const KEY_BITS: u32 = 56;

/// Largest block number an index key holds (2^44 − 1: 64 PiB of 4K blocks).
pub const MAX_BLOCK: u64 = (1 << 44) - 1;
/// Number of volume slots an index key holds.
pub const VOLUME_SLOTS: usize = 1 << 12;

/// The block was read from the device at least once (else, if the ring overwrites it,
/// its feed was wasted).
pub const READ: u8 = 1;
/// Fed from MFU (else MRU).
pub const MFU: u8 = 2;
/// A prefetched block.
pub const PREFETCH: u8 = 4;
/// Metadata.
pub const METADATA: u8 = 8;
/// Failed verification: never read again; still in the table until overwritten or evicted.
const BAD: u8 = 16;
/// Out of the table (overwritten, or bad and then overwritten); waits for the evict hand.
const DEAD: u8 = 32;

/// The key of a block in the index: a volume's slot (below [`VOLUME_SLOTS`]) and a block
/// number (at most [`MAX_BLOCK`]).
pub fn pack_key(slot: u16, block: u64) -> u64 {
    debug_assert!(
        usize::from(slot) < VOLUME_SLOTS,
        "slot {slot} beyond the index key"
    );
    debug_assert!(block <= MAX_BLOCK, "block {block} beyond the index key");
    ((u64::from(slot) & (VOLUME_SLOTS as u64 - 1)) << 44) | (block & MAX_BLOCK)
}

/// The volume slot and block number of an index key.
pub fn unpack_key(key: u64) -> (u16, u64) {
    ((key >> 44) as u16, key & MAX_BLOCK)
}

/// One copy, in five 32-bit words (20 bytes, 4-byte aligned):
/// `checksum` (2 words), then `key << 8 | pos_high << 6 | flags` (2 words), then the low
/// 32 bits of the position.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Entry {
    checksum: [u32; 2],
    tag: [u32; 2],
    pos_low: u32,
}

fn join(w: [u32; 2]) -> u64 {
    u64::from(w[0]) | (u64::from(w[1]) << 32)
}

fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

impl Entry {
    fn new(key: u64, pos: u64, checksum: u64, flags: u8) -> Entry {
        let pos = pos & POS_MASK;
        let tag =
            (key << (64 - KEY_BITS)) | ((pos >> 32) << FLAG_BITS) | (u64::from(flags) & FLAG_MASK);
        Entry {
            checksum: split(checksum),
            tag: split(tag),
            pos_low: pos as u32,
        }
    }

    fn key(&self) -> u64 {
        join(self.tag) >> (64 - KEY_BITS)
    }

    fn checksum(&self) -> u64 {
        join(self.checksum)
    }

    fn pos34(&self) -> u64 {
        let high = (join(self.tag) >> FLAG_BITS) & ((1 << (POS_BITS - 32)) - 1);
        (high << 32) | u64::from(self.pos_low)
    }

    fn flags(&self) -> u8 {
        (join(self.tag) & FLAG_MASK) as u8
    }

    fn set_flag(&mut self, flag: u8) {
        self.tag[0] |= u32::from(flag);
    }
}

/// What the index knows of one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    /// Device offset of the record.
    pub daddr: u64,
    /// Ring position of the record.
    pub ring_pos: u64,
    /// xxh3-64 of the record.
    pub checksum: u64,
    /// [`READ`], [`MFU`], [`PREFETCH`], [`METADATA`].
    pub flags: u8,
}

/// What [`DeviceIndex::push_front_new`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushFront {
    /// The copy is indexed.
    Indexed,
    /// The key was in the index already; nothing changed.
    Present,
    /// The position does not fit (forwards, too far back, unaligned) or the key is too
    /// wide; nothing changed.
    Refused,
}

/// Index of the copies on one cache device (of one engine shard).
pub struct DeviceIndex {
    chunks: VecDeque<Box<[Entry]>>,
    /// Slot of the front entry in `chunks[0]`.
    head: usize,
    len: usize,
    /// Sequence number of the front entry.
    front_seq: u64,
    table: HashTable<u32>,
    sector_shift: u32,
    ring_start: u64,
    ring_bytes: u64,
    /// Full ring position (sectors) of the newest entry.
    newest_pos: u64,
    /// Ring position (bytes) the evict hand has passed: the ring may have written over
    /// any record below it.
    passed: u64,
    /// A freed chunk kept for the next push (saves an allocation per chunk of feed).
    spare: Option<Box<[Entry]>>,
}

/// The keys of a [`DeviceIndex`]'s queue by 32-bit sequence number, for the hash table's
/// callbacks while the table itself is borrowed mutably.
struct QueueKeys<'a> {
    chunks: &'a VecDeque<Box<[Entry]>>,
    head: usize,
    front: u32,
}

impl QueueKeys<'_> {
    fn key(&self, seq32: u32) -> u64 {
        let slot = self.head + seq32.wrapping_sub(self.front) as usize;
        self.chunks[slot / CHUNK][slot % CHUNK].key()
    }
}

fn hash_key(key: u64) -> u64 {
    let mut h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 31;
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 29)
}

impl DeviceIndex {
    /// An empty index for a ring of `ring_bytes` at device offset `ring_start`, in
    /// sectors of `sector_bytes` (a power of two). `None` if the ring is too large for
    /// the position field.
    pub fn new(ring_start: u64, ring_bytes: u64, sector_bytes: u64) -> Option<DeviceIndex> {
        if !sector_bytes.is_power_of_two() || ring_bytes / sector_bytes >= 1 << (POS_BITS - 1) {
            return None;
        }
        Some(DeviceIndex {
            chunks: VecDeque::new(),
            head: 0,
            len: 0,
            front_seq: 0,
            table: HashTable::new(),
            sector_shift: sector_bytes.trailing_zeros(),
            ring_start,
            ring_bytes,
            newest_pos: 0,
            passed: 0,
            spare: None,
        })
    }

    /// Entries in the queue, dead ones included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Live entries (those in the hash table).
    pub fn live(&self) -> usize {
        self.table.len()
    }

    /// Bytes of DRAM the index holds (queue chunks and hash table).
    pub fn dram_bytes(&self) -> u64 {
        let chunk_bytes = (CHUNK * size_of::<Entry>()) as u64;
        let chunks = self.chunks.len() as u64 + u64::from(self.spare.is_some());
        let table = self.table.capacity() as u64;
        // A hashbrown bucket: the 4-byte slot and one control byte.
        chunks * chunk_bytes + table * (size_of::<u32>() as u64 + 1)
    }

    fn at(&self, i: usize) -> &Entry {
        let slot = self.head + i;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn at_mut(&mut self, i: usize) -> &mut Entry {
        let slot = self.head + i;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    /// The hash table, mutable, beside a reader of the queue's keys by sequence number:
    /// the table's callbacks (equality, rehash) look the keys up in the queue.
    fn table_and_keys(&mut self) -> (&mut HashTable<u32>, QueueKeys<'_>) {
        let keys = QueueKeys {
            chunks: &self.chunks,
            head: self.head,
            front: self.front_seq as u32,
        };
        (&mut self.table, keys)
    }

    /// Position in the queue of sequence number `seq32` (low 32 bits).
    fn offset_of(&self, seq32: u32) -> usize {
        seq32.wrapping_sub(self.front_seq as u32) as usize
    }

    fn find(&self, key: u64) -> Option<usize> {
        let found = self
            .table
            .find(hash_key(key), |&s| self.at(self.offset_of(s)).key() == key)?;
        Some(self.offset_of(*found))
    }

    fn full_pos(&self, e: &Entry) -> u64 {
        let back = ((self.newest_pos & POS_MASK).wrapping_sub(e.pos34())) & POS_MASK;
        self.newest_pos - back
    }

    fn copy_of(&self, e: &Entry) -> Copy {
        let ring_pos = self.full_pos(e) << self.sector_shift;
        Copy {
            daddr: self.ring_start + ring_pos % self.ring_bytes,
            ring_pos,
            checksum: e.checksum(),
            flags: e.flags() & (READ | MFU | PREFETCH | METADATA),
        }
    }

    /// The readable copy of `key`, if any.
    pub fn get(&self, key: u64) -> Option<Copy> {
        let i = self.find(key)?;
        let e = self.at(i);
        (e.flags() & BAD == 0).then(|| self.copy_of(e))
    }

    /// Marks the copy of `key` at `ring_pos` bad: it is not read again. False if the
    /// index holds no such copy (the ring or a write got there first).
    pub fn mark_bad(&mut self, key: u64, ring_pos: u64) -> bool {
        let Some(i) = self.find(key) else {
            return false;
        };
        let e = *self.at(i);
        if self.copy_of(&e).ring_pos != ring_pos {
            return false;
        }
        self.at_mut(i).set_flag(BAD);
        true
    }

    /// Whether the evict hand has passed ring position `ring_pos` (bytes): the record
    /// that was there may have been written over since (a read that looked the copy up
    /// before may find other bytes).
    pub fn passed(&self, ring_pos: u64) -> bool {
        ring_pos < self.passed
    }

    /// Whether `key` has an entry (live, or failed and waiting to be tombstoned).
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// The readable copy of `key`, if any, marked as read: a read is about to use it (if
    /// that read fails, the copy is marked bad instead). One lookup for both.
    pub fn get_for_read(&mut self, key: u64) -> Option<Copy> {
        let i = self.find(key)?;
        if self.at(i).flags() & BAD != 0 {
            return None;
        }
        self.at_mut(i).set_flag(READ);
        Some(self.copy_of(self.at(i)))
    }

    /// Appends a copy at ring position `ring_pos` (bytes). Positions must not go
    /// backwards (the ring writes in order) and must be sector-aligned; returns false
    /// (nothing indexed) otherwise. The key must not be in the index.
    pub fn push(&mut self, key: u64, ring_pos: u64, checksum: u64, flags: u8) -> bool {
        let pos = ring_pos >> self.sector_shift;
        if ring_pos & ((1 << self.sector_shift) - 1) != 0
            || (self.len > 0 && pos < self.newest_pos)
            || key >> KEY_BITS != 0
        {
            return false;
        }
        debug_assert!(self.find(key).is_none(), "key {key:#x} indexed twice");
        let entry = Entry::new(
            key,
            pos,
            checksum,
            flags & (READ | MFU | PREFETCH | METADATA),
        );
        let slot = self.head + self.len;
        if slot / CHUNK == self.chunks.len() {
            let chunk = self
                .spare
                .take()
                .unwrap_or_else(|| vec![Entry::default(); CHUNK].into_boxed_slice());
            self.chunks.push_back(chunk);
        }
        self.chunks[slot / CHUNK][slot % CHUNK] = entry;
        let seq = self.front_seq.wrapping_add(self.len as u64) as u32;
        self.len += 1;
        self.newest_pos = pos;
        let (table, keys) = self.table_and_keys();
        table.insert_unique(hash_key(key), seq, |&s| hash_key(keys.key(s)));
        true
    }

    /// Prepends an older copy at ring position `ring_pos` (bytes): what a rebuild does,
    /// since it walks the log newest first. Positions must not go forwards (not past the
    /// front entry's), must stay within 2^33 sectors of the newest entry, and must be
    /// sector-aligned; returns false (nothing indexed) otherwise. The key must not be in
    /// the index. Once built, the index takes newer copies at the back with
    /// [`DeviceIndex::push`] as usual.
    pub fn push_front(&mut self, key: u64, ring_pos: u64, checksum: u64, flags: u8) -> bool {
        debug_assert!(self.find(key).is_none(), "key {key:#x} indexed twice");
        self.push_front_new(key, ring_pos, checksum, flags) == PushFront::Indexed
    }

    /// [`DeviceIndex::push_front`] of a key that may be in the index already, in one
    /// lookup: [`PushFront::Present`] (nothing changes) if it is.
    pub fn push_front_new(
        &mut self,
        key: u64,
        ring_pos: u64,
        checksum: u64,
        flags: u8,
    ) -> PushFront {
        let Some(pos) = self.front_pos(key, ring_pos) else {
            return self.refused_unless_present(key);
        };
        let entry = Entry::new(
            key,
            pos,
            checksum,
            flags & (READ | MFU | PREFETCH | METADATA),
        );
        // The sequence number the entry gets: one before the front's.
        let seq = self.front_seq.wrapping_sub(1) as u32;
        let (table, keys) = self.table_and_keys();
        match table.entry(
            hash_key(key),
            |&s| keys.key(s) == key,
            |&s| hash_key(keys.key(s)),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => return PushFront::Present,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(seq);
            }
        }
        self.prepend(pos, entry);
        PushFront::Indexed
    }

    /// The sector position of an older copy of `key` at `ring_pos` (bytes), if it may go
    /// in front of the queue: sector-aligned, a key that fits, not past the front entry's
    /// position and within 2^33 sectors of the newest.
    fn front_pos(&self, key: u64, ring_pos: u64) -> Option<u64> {
        let pos = ring_pos >> self.sector_shift;
        if ring_pos & ((1 << self.sector_shift) - 1) != 0 || key >> KEY_BITS != 0 {
            return None;
        }
        if self.len > 0 {
            let front = self.full_pos(self.at(0));
            if pos > front || self.newest_pos - pos >= 1 << (POS_BITS - 1) {
                return None;
            }
        }
        Some(pos)
    }

    /// Puts `entry`, at sector position `pos`, in front of the queue under the sequence
    /// number before the front's (the hash table is the caller's business).
    fn prepend(&mut self, pos: u64, entry: Entry) {
        if self.len == 0 {
            self.newest_pos = pos;
        }
        if self.head == 0 {
            let chunk = self
                .spare
                .take()
                .unwrap_or_else(|| vec![Entry::default(); CHUNK].into_boxed_slice());
            self.chunks.push_front(chunk);
            self.head = CHUNK;
        }
        self.head -= 1;
        self.len += 1;
        self.front_seq = self.front_seq.wrapping_sub(1);
        self.chunks[0][self.head] = entry;
    }

    /// Prepends an older copy like [`DeviceIndex::push_front`], but leaves it out of the
    /// hash table until [`DeviceIndex::index_unindexed`]: a rebuild appends millions of
    /// entries in ring order (sequential memory) and fills the table once at the end, in
    /// the table's own order, instead of one random lookup per entry. Until then the
    /// index must be used for nothing but more of these pushes. False (nothing done) if
    /// the position does not fit or the key is too wide, as for `push_front`.
    pub fn push_front_unindexed(
        &mut self,
        key: u64,
        ring_pos: u64,
        checksum: u64,
        flags: u8,
    ) -> bool {
        let Some(pos) = self.front_pos(key, ring_pos) else {
            return false;
        };
        let entry = Entry::new(
            key,
            pos,
            checksum,
            flags & (READ | MFU | PREFETCH | METADATA),
        );
        self.prepend(pos, entry);
        true
    }

    /// Puts every entry of an index built by [`DeviceIndex::push_front_unindexed`] into
    /// the hash table. Where a key is in the queue twice, the newer entry (nearer the
    /// back) is indexed and the older marked dead; `duplicate` is called with the key
    /// and the older copy. The entries go in grouped by the part of the table they land in, so the
    /// table is written nearly in order (a few kilobytes at a time) rather than at random.
    pub fn index_unindexed(&mut self, mut duplicate: impl FnMut(u64, Copy)) {
        assert!(
            self.table.is_empty(),
            "{} keys indexed before the bulk insert",
            self.table.len()
        );
        self.reserve(self.len);
        // hashbrown's bucket is the hash's low bits under its bucket mask.
        let buckets = (self.table.capacity() * 8 / 7).next_power_of_two().max(1);
        let bucket_bits = buckets.trailing_zeros();
        let group_bits = bucket_bits.min(12);
        let group_of =
            |hash: u64| ((hash & (buckets as u64 - 1)) >> (bucket_bits - group_bits)) as usize;
        // A stable counting sort of (key, place in the queue) by group, newest first, so
        // that the first of a key to be inserted is its newest entry.
        let mut counts = vec![0usize; (1 << group_bits) + 1];
        for i in 0..self.len {
            counts[group_of(hash_key(self.at(i).key())) + 1] += 1;
        }
        for g in 1..counts.len() {
            counts[g] += counts[g - 1];
        }
        let mut order = vec![(0u64, 0u32); self.len];
        for i in (0..self.len).rev() {
            let key = self.at(i).key();
            let slot = &mut counts[group_of(hash_key(key))];
            order[*slot] = (key, i as u32);
            *slot += 1;
        }
        for (key, i) in order {
            let i = i as usize;
            let seq = self.front_seq.wrapping_add(i as u64) as u32;
            let (table, keys) = self.table_and_keys();
            let entry = table.entry(
                hash_key(key),
                |&s| keys.key(s) == key,
                |&s| hash_key(keys.key(s)),
            );
            match entry {
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(seq);
                }
                hashbrown::hash_table::Entry::Occupied(_) => {
                    let copy = self.copy_of(self.at(i));
                    self.at_mut(i).set_flag(DEAD);
                    duplicate(key, copy);
                }
            }
        }
    }

    fn refused_unless_present(&self, key: u64) -> PushFront {
        if self.contains(key) {
            PushFront::Present
        } else {
            PushFront::Refused
        }
    }

    /// Makes room in the hash table for `additional` more keys (a rebuild that knows how
    /// many entries its log holds grows the table once instead of doubling it).
    pub fn reserve(&mut self, additional: usize) {
        let (table, keys) = self.table_and_keys();
        table.reserve(additional, |&s| hash_key(keys.key(s)));
    }

    /// Removes `key`'s entry, readable or bad (the block was overwritten, or its device
    /// goes): it leaves the table at once and its queue slot is marked dead. Returns what
    /// it was.
    pub fn remove(&mut self, key: u64) -> Option<Copy> {
        let (table, keys) = self.table_and_keys();
        let found = table.find_entry(hash_key(key), |&s| keys.key(s) == key);
        let (seq, _) = found.ok()?.remove();
        let i = self.offset_of(seq);
        let copy = self.copy_of(self.at(i));
        self.at_mut(i).set_flag(DEAD);
        Some(copy)
    }

    /// Pops every entry whose record lies below ring position `floor` (bytes): the
    /// evict hand passed it. Calls `evicted` with the key and copy of each live one.
    pub fn evict_below(&mut self, floor: u64, mut evicted: impl FnMut(u64, Copy)) {
        self.passed = self.passed.max(floor);
        while self.len > 0 {
            let e = *self.at(0);
            let copy = self.copy_of(&e);
            if copy.ring_pos >= floor {
                break;
            }
            if e.flags() & DEAD == 0 {
                let seq = self.front_seq as u32;
                if let Ok(found) = self.table.find_entry(hash_key(e.key()), |&s| s == seq) {
                    found.remove();
                }
                evicted(e.key(), copy);
            }
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        self.head += 1;
        self.len -= 1;
        self.front_seq = self.front_seq.wrapping_add(1);
        if self.head == CHUNK || self.len == 0 {
            if self.head == CHUNK {
                self.head = 0;
                if let Some(chunk) = self.chunks.pop_front() {
                    self.spare = Some(chunk);
                }
            }
            if self.len == 0 {
                // Keep the sequence numbering; drop the chunks but one.
                self.head = 0;
                while self.chunks.len() > 1 {
                    self.chunks.pop_back();
                }
                if let Some(chunk) = self.chunks.pop_front() {
                    self.spare = Some(chunk);
                }
            }
        }
    }

    /// The keys of the live copies that `pick` picks (an O(n) walk of the queue).
    pub fn live_keys_where(&self, mut pick: impl FnMut(u64) -> bool) -> Vec<u64> {
        (0..self.len)
            .map(|i| self.at(i))
            .filter(|e| e.flags() & DEAD == 0 && pick(e.key()))
            .map(|e| e.key())
            .collect()
    }

    /// Every live copy, with its key (for removing a device).
    pub fn drain_live(&mut self) -> Vec<(u64, Copy)> {
        let mut out = Vec::with_capacity(self.live());
        for i in 0..self.len {
            let e = *self.at(i);
            if e.flags() & DEAD == 0 {
                out.push((e.key(), self.copy_of(&e)));
            }
        }
        *self = DeviceIndex::new(self.ring_start, self.ring_bytes, 1 << self.sector_shift)
            .expect("same geometry as before");
        out
    }

    /// O(n) consistency walk for tests: panics if the queue, the table and the positions
    /// disagree.
    pub fn check(&self) {
        let mut live = 0;
        let mut prev = 0;
        for i in 0..self.len {
            let e = self.at(i);
            let pos = self.full_pos(e);
            assert!(i == 0 || pos >= prev, "entry {i} at {pos} before {prev}");
            prev = pos;
            if e.flags() & DEAD == 0 {
                live += 1;
                assert_eq!(self.find(e.key()), Some(i), "entry {i} not found by key");
            }
        }
        assert_eq!(live, self.table.len(), "table and queue disagree");
    }
}

/// A set of index keys (8 bytes and a control byte per slot): what a rebuild remembers
/// of the keys it met but did not index.
#[derive(Default)]
pub(crate) struct KeySet {
    table: HashTable<u64>,
}

impl KeySet {
    /// Adds `key`; false if it was there.
    pub(crate) fn insert(&mut self, key: u64) -> bool {
        let hash = hash_key(key);
        if self.table.find(hash, |&k| k == key).is_some() {
            return false;
        }
        self.table.insert_unique(hash, key, |&k| hash_key(k));
        true
    }

    /// Whether `key` is in the set.
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.table.find(hash_key(key), |&k| k == key).is_some()
    }
}

/// An empty index for a device of geometry `geo`, or why the index cannot hold its ring.
pub(crate) fn fresh_index(
    geo: &larch_l2::Geometry,
) -> Result<DeviceIndex, crate::error::IndexTooLarge> {
    DeviceIndex::new(geo.ring_start, geo.ring_bytes(), geo.sector_bytes).ok_or(
        crate::error::IndexTooLarge {
            ring_bytes: geo.ring_bytes(),
            sector_bytes: geo.sector_bytes,
        },
    )
}

/// A shard's L2 index: one compact [`DeviceIndex`] per cache device (by device index).
#[derive(Default)]
pub(crate) struct ShardL2 {
    devices: Vec<Option<DeviceIndex>>,
}

/// Where a block's copy lives: the device and what the index says of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct L2Loc {
    pub(crate) device: u16,
    pub(crate) copy: Copy,
}

impl ShardL2 {
    pub(crate) fn device_mut(&mut self, device: u16) -> Option<&mut DeviceIndex> {
        self.devices.get_mut(usize::from(device))?.as_mut()
    }

    /// Gives device `device` an index (empty), replacing any it had.
    pub(crate) fn attach(&mut self, device: u16, index: DeviceIndex) {
        let slot = usize::from(device);
        if self.devices.len() <= slot {
            self.devices.resize_with(slot + 1, || None);
        }
        self.devices[slot] = Some(index);
    }

    /// Drops device `device`'s index, returning its live copies.
    pub(crate) fn detach(&mut self, device: u16) -> Vec<(u64, Copy)> {
        let Some(slot) = self.devices.get_mut(usize::from(device)) else {
            return Vec::new();
        };
        let live = slot.as_mut().map(|d| d.drain_live()).unwrap_or_default();
        *slot = None;
        live
    }

    /// The readable copy of `key`, on whichever device holds it, marked as read (a read
    /// of it follows).
    pub(crate) fn get_for_read(&mut self, key: u64) -> Option<L2Loc> {
        self.devices.iter_mut().enumerate().find_map(|(i, d)| {
            let copy = d.as_mut()?.get_for_read(key)?;
            Some(L2Loc {
                device: i as u16,
                copy,
            })
        })
    }

    /// Whether any device has an entry (readable or bad) for `key`.
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.devices.iter().flatten().any(|d| d.contains(key))
    }

    /// Removes every entry of `key` (a block of `psize` bytes; at most one entry per
    /// device), returning where they were.
    pub(crate) fn remove(&mut self, key: u64, psize: u32, stats: &EngineStats) -> Vec<L2Loc> {
        let mut out = Vec::new();
        for (i, d) in self.devices.iter_mut().enumerate() {
            if let Some(copy) = d.as_mut().and_then(|d| d.remove(key)) {
                account(&copy, psize, stats, false);
                out.push(L2Loc {
                    device: i as u16,
                    copy,
                });
            }
        }
        out
    }

    pub(crate) fn dram_bytes(&self) -> u64 {
        self.devices.iter().flatten().map(|d| d.dram_bytes()).sum()
    }

    /// The keys with a live copy on any device that `pick` picks, each once.
    pub(crate) fn keys_where(&self, mut pick: impl FnMut(u64) -> bool) -> Vec<u64> {
        let mut keys: Vec<u64> = (self.devices.iter().flatten())
            .flat_map(|d| d.live_keys_where(&mut pick))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Live copies on cache device `device` (of this shard).
    pub(crate) fn live_on(&self, device: u16) -> u64 {
        self.devices
            .get(usize::from(device))
            .and_then(|d| d.as_ref())
            .map_or(0, |d| d.live() as u64)
    }
}

/// Which of the by-state counters a copy counts in: 0 prefetch, 1 MFU, 2 MRU.
fn state_of(flags: u8) -> usize {
    if flags & PREFETCH != 0 {
        0
    } else if flags & MFU != 0 {
        1
    } else {
        2
    }
}

/// Which of the by-type counters a copy counts in: 0 metadata, 1 data.
fn type_of(flags: u8) -> usize {
    usize::from(flags & METADATA == 0)
}

/// Adds (`add`) or removes a copy of `psize` bytes in the L2 size counters.
pub(crate) fn account(copy: &Copy, psize: u32, stats: &EngineStats, add: bool) {
    let mut tally = Tally::default();
    tally.add(copy.flags, psize);
    if add {
        tally.apply(stats);
    } else {
        tally.withdraw(stats);
    }
}

/// The L2 size counters of many copies, summed before they are applied at once (a
/// rebuild indexes millions of copies and publishes them when it attaches its index).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    blocks: u64,
    bytes: u64,
    by_state: [u64; 3],
    by_type: [u64; 2],
}

impl Tally {
    /// Counts a copy with index flags `flags` of `psize` bytes.
    pub(crate) fn add(&mut self, flags: u8, psize: u32) {
        let bytes = u64::from(psize);
        self.blocks += 1;
        self.bytes += bytes;
        self.by_state[state_of(flags)] += bytes;
        self.by_type[type_of(flags)] += bytes;
    }

    /// Copies counted.
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Uncounts a copy counted with [`Tally::add`].
    pub(crate) fn sub(&mut self, flags: u8, psize: u32) {
        let bytes = u64::from(psize);
        self.blocks -= 1;
        self.bytes -= bytes;
        self.by_state[state_of(flags)] -= bytes;
        self.by_type[type_of(flags)] -= bytes;
    }

    /// Adds the tally to the engine's counters.
    pub(crate) fn apply(&self, stats: &EngineStats) {
        self.update(stats, |counter, v| counter.fetch_add(v, Ordering::Relaxed));
    }

    /// Takes the tally off the engine's counters.
    fn withdraw(&self, stats: &EngineStats) {
        self.update(stats, |counter, v| counter.fetch_sub(v, Ordering::Relaxed));
    }

    fn update(&self, stats: &EngineStats, op: impl Fn(&AtomicU64, u64) -> u64) {
        op(&stats.l2_size, self.bytes);
        op(&stats.l2_asize, self.bytes);
        op(&stats.l2_blocks, self.blocks);
        let by_state = [
            &stats.l2_prefetch_asize,
            &stats.l2_mfu_asize,
            &stats.l2_mru_asize,
        ];
        for (counter, v) in by_state.into_iter().zip(self.by_state) {
            op(counter, v);
        }
        let by_type = [&stats.l2_bufc_metadata_asize, &stats.l2_bufc_data_asize];
        for (counter, v) in by_type.into_iter().zip(self.by_type) {
            op(counter, v);
        }
    }
}

/// Index flags of a copy fed or restored with these properties.
pub(crate) fn flags_of(mfu: bool, prefetch: bool, metadata: bool) -> u8 {
    let mut flags = 0;
    if mfu {
        flags |= MFU;
    }
    if prefetch {
        flags |= PREFETCH;
    }
    if metadata {
        flags |= METADATA;
    }
    flags
}

#[cfg(test)]
mod tests;

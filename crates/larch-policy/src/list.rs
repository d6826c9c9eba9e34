//! Header storage: a slab of block headers linked into intrusive doubly linked lists by
//! 32-bit indices, plus the key index that finds a header by its block key.
//!
//! Why a slab: the ARC moves a header between lists on almost every access. With indices
//! into one `Vec`, a move is a handful of stores and never allocates, and a header costs a
//! fixed, measurable number of bytes (see `HEADER_BYTES`).

use std::hash::Hasher;

use crate::index::{KeyIndex, prefetch_line};
use crate::{BlockKey, BufType, State};

/// The "no header" index.
pub(crate) const NIL: u32 = u32::MAX;

/// Header flag: the block was last brought in by a prefetch and no demand read has used it.
pub(crate) const FLAG_PREFETCH: u8 = 1 << 0;
/// Header flag: the block may be written to a cache device (secondarycache allows it).
pub(crate) const FLAG_L2CACHE: u8 = 1 << 1;
/// Header flag: a copy of this block (this generation) is on a cache device.
pub(crate) const FLAG_HAS_L2: u8 = 1 << 2;
/// Header flag: the block is dirty (written, not yet on the backing store).
pub(crate) const FLAG_DIRTY: u8 = 1 << 3;
/// Header flag: primarycache excludes this block; drop it as soon as nobody holds it.
pub(crate) const FLAG_UNCACHED: u8 = 1 << 4;
/// Header flag: the block's contents came from a write and no read has used them since.
pub(crate) const FLAG_WRITTEN: u8 = 1 << 5;

/// One tracked block: resident, ghost, dirty or known only to the cache device.
/// Aligned to a cache line so that touching a header costs one line, not two.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Header {
    pub key: BlockKey,
    pub generation: u64,
    /// Logical size in bytes. Ghost and L2-only headers keep it for the accounting.
    pub size_bytes: u32,
    pub state: State,
    pub buf_type: BufType,
    pub flags: u8,
    /// Holds taken by callers (reads in flight, buffers lent out). A held header is on no list.
    pub refcount: u16,
    /// Under [`crate::ArcPolicy::Larch`]: hits since the block entered MFU, at most
    /// `MAX_MARKS`; each lets it pass MFU's cold end once more instead of leaving.
    pub marks: u8,
    /// Time of the last access, in the caller's milliseconds.
    pub access_ms: u64,
    /// Logical time of the last move to a list head: orders the tails of the data and metadata
    /// lists. Under the larch policy a ghost keeps its block's last one (`Arc::evict_one`).
    pub touch_seq: u64,
    pub prev: u32,
    pub next: u32,
}

impl Header {
    /// A header not yet on any list or counted in any state (state `Anon` until attached).
    pub fn detached(
        key: BlockKey,
        generation: u64,
        size_bytes: u32,
        buf_type: BufType,
        flags: u8,
        access_ms: u64,
    ) -> Header {
        Header {
            key,
            generation,
            size_bytes,
            state: State::Anon,
            buf_type,
            flags,
            refcount: 0,
            marks: 0,
            access_ms,
            touch_seq: 0,
            prev: NIL,
            next: NIL,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Bytes of RAM one header costs in the slab (the key index adds its own share).
pub const HEADER_BYTES: usize = std::mem::size_of::<Header>();

/// A list of headers, most recently used at the head, eviction from the tail.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: u64,
    pub bytes: u64,
}

impl List {
    pub const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
        bytes: 0,
    };
}

/// A fast, deterministic hasher for block keys (a 64-bit mix with a murmur-style finish).
/// Deterministic on purpose: the simulator must give the same answer on every run. The
/// engine hashes its tables by block key with it too.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(27) ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The hash of a block key in the index.
pub(crate) fn hash_key(key: &BlockKey) -> u64 {
    let mut hasher = KeyHasher(0);
    hasher.write_u64(key.volume);
    hasher.write_u64(key.block);
    hasher.finish()
}

/// Headers, their free slots, and the key index. The index holds only slab indices and
/// tags of their keys' hashes (6 bytes each); the key is stored once, in the header, and
/// compared there.
#[derive(Clone, Default)]
pub(crate) struct Slab {
    pub headers: Vec<Header>,
    free_head: u32,
    free_len: usize,
    pub index: KeyIndex,
    touch_clock: u64,
}

impl Slab {
    pub fn new() -> Slab {
        Slab {
            headers: Vec::new(),
            free_head: NIL,
            free_len: 0,
            index: KeyIndex::default(),
            touch_clock: 0,
        }
    }

    pub fn lookup(&self, key: &BlockKey) -> Option<u32> {
        self.lookup_hashed(hash_key(key), key)
    }

    /// [`Slab::lookup`] for a caller that has `key`'s hash already.
    pub fn lookup_hashed(&self, hash: u64, key: &BlockKey) -> Option<u32> {
        let headers = &self.headers;
        self.index.find(hash, |id| headers[id as usize].key == *key)
    }

    /// Starts loading the part of the key index that a lookup of `key` reads first: for
    /// a caller that knows its next key while it still has work to do.
    pub fn prefetch(&self, key: &BlockKey) {
        self.prefetch_hashed(hash_key(key));
    }

    /// [`Slab::prefetch`] for a caller that has the key's hash already.
    pub fn prefetch_hashed(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// Starts loading the headers a lookup of `key` would compare, found through its
    /// bucket of the key index: the second step after [`Slab::prefetch`], taken once that
    /// bucket has had time to arrive.
    pub fn prefetch_headers(&self, key: &BlockKey) {
        let headers = &self.headers;
        self.index.home_matches(hash_key(key), |id| {
            if let Some(h) = headers.get(id as usize) {
                prefetch_line(h);
            }
        });
    }

    pub fn get(&self, id: u32) -> &Header {
        &self.headers[id as usize]
    }

    pub fn get_mut(&mut self, id: u32) -> &mut Header {
        &mut self.headers[id as usize]
    }

    /// Sets every header's MFU marks to 0.
    pub fn clear_marks(&mut self) {
        for h in &mut self.headers {
            h.marks = 0;
        }
    }

    /// Number of live headers.
    pub fn live(&self) -> usize {
        self.headers.len() - self.free_len
    }

    /// Allocates a header for `key`, which must not be indexed yet, and indexes it.
    pub fn alloc(&mut self, header: Header) -> u32 {
        let key = header.key;
        let id = if self.free_head != NIL {
            let id = self.free_head;
            self.free_head = self.headers[id as usize].next;
            self.free_len -= 1;
            self.headers[id as usize] = header;
            id
        } else {
            assert!(self.headers.len() < NIL as usize, "header slab full");
            self.headers.push(header);
            (self.headers.len() - 1) as u32
        };
        debug_assert!(self.lookup(&key).is_none(), "key {key:?} indexed twice");
        let headers = &self.headers;
        self.index
            .insert(hash_key(&key), id, |i| hash_key(&headers[i as usize].key));
        id
    }

    /// Removes a header (already unlinked from its list) from the index and frees its slot.
    pub fn free(&mut self, id: u32) {
        let key = self.headers[id as usize].key;
        assert!(
            self.index.remove(hash_key(&key), id),
            "freeing header {id} ({key:?}) that the index does not hold"
        );
        let header = &mut self.headers[id as usize];
        header.state = State::Anon;
        header.prev = NIL;
        header.next = self.free_head;
        self.free_head = id;
        self.free_len += 1;
    }

    /// Links `id` at the head of `list` (most recently used end).
    pub fn push_head(&mut self, list: &mut List, id: u32) {
        self.touch_clock += 1;
        let old_head = list.head;
        let header = &mut self.headers[id as usize];
        header.prev = NIL;
        header.next = old_head;
        header.touch_seq = self.touch_clock;
        list.bytes += u64::from(header.size_bytes);
        list.len += 1;
        if old_head == NIL {
            list.tail = id;
        } else {
            self.headers[old_head as usize].prev = id;
        }
        list.head = id;
    }

    /// Moves `id`, on `list`, to its head: a requeue, with the links alone rewritten
    /// (the list's length and bytes stay).
    pub fn move_to_head(&mut self, list: &mut List, id: u32) {
        self.touch_clock += 1;
        let old_head = list.head;
        let header = &mut self.headers[id as usize];
        header.touch_seq = self.touch_clock;
        if old_head == id {
            return;
        }
        let (prev, next) = (header.prev, header.next);
        header.prev = NIL;
        header.next = old_head;
        // Not the head, so it has a predecessor.
        self.headers[prev as usize].next = next;
        if next == NIL {
            list.tail = prev;
        } else {
            self.headers[next as usize].prev = prev;
        }
        self.headers[old_head as usize].prev = id;
        list.head = id;
    }

    /// Unlinks `id` from `list`.
    pub fn unlink(&mut self, list: &mut List, id: u32) {
        let (prev, next, size) = {
            let h = &self.headers[id as usize];
            (h.prev, h.next, h.size_bytes)
        };
        if prev == NIL {
            list.head = next;
        } else {
            self.headers[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.headers[next as usize].prev = prev;
        }
        let header = &mut self.headers[id as usize];
        header.prev = NIL;
        header.next = NIL;
        list.bytes -= u64::from(size);
        list.len -= 1;
    }

    /// Walks a list from head to tail, for invariant checks.
    pub fn walk(&self, list: &List) -> Vec<u32> {
        let mut ids = Vec::with_capacity(list.len as usize);
        let mut id = list.head;
        while id != NIL {
            ids.push(id);
            assert!(
                ids.len() as u64 <= list.len,
                "list longer than its count {}",
                list.len
            );
            id = self.headers[id as usize].next;
        }
        ids
    }
}

//! The key index: finds a header's slab index by the hash of its block key.
//!
//! Why not a general hash table: the ARC looks a key up on every access, and with a
//! data set larger than the CPU's caches each cache line the lookup touches is a wait for
//! memory. A table of control bytes beside a separate array of slots (hashbrown's
//! layout) costs three such waits for a key that is there: the control bytes, the slot,
//! then the header to compare the key. Here a bucket is one cache line that holds both a
//! 16-bit tag of each entry's hash and the entry's slab index, so a key that is there
//! costs two (its bucket, then its header) and a key that is not there usually one (a
//! tag matches a wrong entry once in 65,536 comparisons).
//!
//! The table is open addressing over buckets: an entry lives in its home bucket (low bits
//! of the hash) or, when that is full, in the next bucket with a free slot. Each bucket
//! counts the entries that had to pass it on the way to their bucket, so that a search
//! stops at the first bucket whose count is zero (or, in a small table where overflow
//! can go all the way round, once it has seen every bucket), and a removal needs no tombstone: it
//! takes one off the counts of the buckets its entry passed. The index holds no keys;
//! the caller compares the key in the header, and hashes headers again when it grows.

/// Entries in a bucket: ten 16-bit tags and ten 32-bit indices, with the overflow count,
/// fill one 64-byte cache line.
const SLOTS: usize = 10;

/// The tag of an empty slot. Real tags are never zero (see `tag_of`).
const EMPTY: u16 = 0;

/// One cache line of the index.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Bucket {
    /// Top 16 bits of each entry's hash (never zero), or `EMPTY`.
    tags: [u16; SLOTS],
    /// Entries whose home bucket is earlier and that live later: a search that misses
    /// here goes on while it is not zero. Saturates: a bucket that many entries passed
    /// (never seen with a good hash) is searched through for good.
    overflow: u16,
    /// The slab index of each occupied slot.
    ids: [u32; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

impl Bucket {
    const EMPTY: Bucket = Bucket {
        tags: [EMPTY; SLOTS],
        overflow: 0,
        ids: [0; SLOTS],
    };

    /// A bit per slot whose tag is `tag`, lowest slot in the lowest bit. A plain loop over
    /// indices: the compiler turns it into a few vector instructions, and in an unoptimized
    /// build (the tests') it costs a tenth of an iterator chain's time.
    fn matching(&self, tag: u16) -> u32 {
        let mut mask = 0;
        let mut slot = 0;
        while slot < SLOTS {
            mask |= u32::from(self.tags[slot] == tag) << slot;
            slot += 1;
        }
        mask
    }
}

/// The slots whose bits are set in `mask`, lowest first.
fn slots(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let slot = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        Some(slot)
    })
}

/// The tag of a hash: its top 16 bits, zero (the empty slot's) made one.
fn tag_of(hash: u64) -> u16 {
    ((hash >> 48) as u16).max(1)
}

/// Starts loading the cache line of `value` (a hint: no effect on other targets).
pub(crate) fn prefetch_line<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault, whatever the
    // address; this one is a live reference's.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Slab indices by key hash (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyIndex {
    /// A power of two of them, or none before the first insert.
    buckets: Vec<Bucket>,
    len: usize,
}

impl KeyIndex {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask()
    }

    /// Starts loading the bucket a search for `hash` reads first.
    pub fn prefetch(&self, hash: u64) {
        if !self.buckets.is_empty() {
            prefetch_line(&self.buckets[self.home(hash)]);
        }
    }

    /// Calls `each` with every index held in the home bucket of `hash` whose tag matches:
    /// the headers a search would compare first, for a caller that starts loading them
    /// ahead of the lookup (its bucket loaded by an earlier [`KeyIndex::prefetch`]).
    pub fn home_matches(&self, hash: u64, mut each: impl FnMut(u32)) {
        if self.buckets.is_empty() {
            return;
        }
        let bucket = &self.buckets[self.home(hash)];
        for slot in slots(bucket.matching(tag_of(hash))) {
            each(bucket.ids[slot]);
        }
    }

    /// The index of `hash` for which `is_it` says yes (it compares the key in the header).
    pub fn find(&self, hash: u64, mut is_it: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let tag = tag_of(hash);
        let mut b = self.home(hash);
        // Overflow can pass all the way round a small table: at most every bucket once.
        for _ in 0..self.buckets.len() {
            let bucket = &self.buckets[b];
            let mut matches = bucket.matching(tag);
            while matches != 0 {
                let slot = matches.trailing_zeros() as usize;
                if is_it(bucket.ids[slot]) {
                    return Some(bucket.ids[slot]);
                }
                matches &= matches - 1;
            }
            if bucket.overflow == 0 {
                return None;
            }
            b = (b + 1) & self.mask();
        }
        None
    }

    /// Adds `id` under `hash`; the caller knows it is not there yet. `rehash` gives the
    /// hash of an index already held, for when the table grows.
    pub fn insert(&mut self, hash: u64, id: u32, rehash: impl Fn(u32) -> u64) {
        // At most seven eighths of the slots in use keeps the chains past a full bucket short.
        if (self.len + 1) * 8 > self.buckets.len() * SLOTS * 7 {
            self.grow(rehash);
        }
        self.place(hash, id);
        self.len += 1;
    }

    fn place(&mut self, hash: u64, id: u32) {
        let tag = tag_of(hash);
        let mask = self.mask();
        let mut b = self.home(hash);
        loop {
            let bucket = &mut self.buckets[b];
            if let Some(slot) = slots(bucket.matching(EMPTY)).next() {
                bucket.tags[slot] = tag;
                bucket.ids[slot] = id;
                return;
            }
            bucket.overflow = bucket.overflow.saturating_add(1);
            b = (b + 1) & mask;
        }
    }

    /// Twice the buckets, every entry placed again by its hash.
    fn grow(&mut self, rehash: impl Fn(u32) -> u64) {
        let count = (self.buckets.len() * 2).max(2);
        let old = std::mem::replace(&mut self.buckets, vec![Bucket::EMPTY; count]);
        for bucket in &old {
            for slot in slots(!bucket.matching(EMPTY) & ((1 << SLOTS) - 1)) {
                let id = bucket.ids[slot];
                self.place(rehash(id), id);
            }
        }
    }

    /// Removes `id`, held under `hash`. Returns whether it was there.
    pub fn remove(&mut self, hash: u64, id: u32) -> bool {
        if self.buckets.is_empty() {
            return false;
        }
        let tag = tag_of(hash);
        let mask = self.mask();
        let home = self.home(hash);
        let mut b = home;
        let mut found = None;
        for _ in 0..self.buckets.len() {
            let bucket = &self.buckets[b];
            found = slots(bucket.matching(tag)).find(|&s| bucket.ids[s] == id);
            if found.is_some() || bucket.overflow == 0 {
                break;
            }
            b = (b + 1) & mask;
        }
        let Some(found) = found else {
            return false;
        };
        self.buckets[b].tags[found] = EMPTY;
        // The entry passed the buckets from its home to the one before its own.
        let mut passed = home;
        while passed != b {
            let bucket = &mut self.buckets[passed];
            if bucket.overflow != u16::MAX {
                bucket.overflow -= 1;
            }
            passed = (passed + 1) & mask;
        }
        self.len -= 1;
        true
    }

    /// Every index held, in bucket order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.buckets.iter().flat_map(|bucket| {
            slots(!bucket.matching(EMPTY) & ((1 << SLOTS) - 1)).map(move |slot| bucket.ids[slot])
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A hash that collides on purpose: seven homes at the end of the table, so that
    /// chains wrap around to its start, and three tags.
    fn crowded(key: u64) -> u64 {
        (key % 7).wrapping_neg() ^ ((key % 3) << 48)
    }

    fn spread(key: u64) -> u64 {
        crate::list::hash_key(&crate::BlockKey::new(1, key))
    }

    fn check(index: &KeyIndex, model: &BTreeMap<u32, u64>, hash: impl Fn(u64) -> u64) {
        assert_eq!(index.len(), model.len());
        let mut held: Vec<u32> = index.iter().collect();
        held.sort_unstable();
        assert_eq!(held, model.keys().copied().collect::<Vec<_>>());
        for (&id, &key) in model {
            assert_eq!(index.find(hash(key), |i| i == id), Some(id), "key {key}");
        }
        // The overflow counts are exact: each bucket's is the number of entries that passed it.
        if !index.buckets.is_empty() {
            let mut passed = vec![0u32; index.buckets.len()];
            for (b, bucket) in index.buckets.iter().enumerate() {
                for slot in slots(!bucket.matching(EMPTY) & ((1 << SLOTS) - 1)) {
                    let key = model[&bucket.ids[slot]];
                    let mut p = index.home(hash(key));
                    while p != b {
                        passed[p] += 1;
                        p = (p + 1) & index.mask();
                    }
                }
            }
            for (b, bucket) in index.buckets.iter().enumerate() {
                assert_eq!(u32::from(bucket.overflow), passed[b], "bucket {b}");
            }
        }
    }

    fn run(ops: &[(bool, u16)], hash: impl Fn(u64) -> u64 + Copy) {
        // Slab index i holds key 1000 + i: the model maps ids to keys.
        let mut index = KeyIndex::default();
        let mut model: BTreeMap<u32, u64> = BTreeMap::new();
        for &(insert, n) in ops {
            let id = u32::from(n % 300);
            let key = 1000 + u64::from(id);
            let held = model.contains_key(&id);
            if insert && !held {
                index.insert(hash(key), id, |i| hash(1000 + u64::from(i)));
                model.insert(id, key);
            } else if !insert {
                assert_eq!(index.remove(hash(key), id), held, "remove {id}");
                model.remove(&id);
                assert_eq!(index.find(hash(key), |i| i == id), None);
            }
        }
        check(&index, &model, hash);
    }

    #[test]
    fn an_empty_index_finds_and_removes_nothing() {
        let mut index = KeyIndex::default();
        assert_eq!(index.find(5, |_| true), None);
        assert!(!index.remove(5, 1));
        assert_eq!(index.iter().count(), 0);
    }

    #[test]
    fn a_tag_match_is_confirmed_by_the_caller() {
        let mut index = KeyIndex::default();
        index.insert(42, 1, |_| 42);
        index.insert(42, 2, |_| 42);
        assert_eq!(index.find(42, |i| i == 2), Some(2));
        assert_eq!(index.find(42, |_| false), None);
    }

    #[test]
    fn a_search_ends_when_overflow_goes_round_the_whole_table() {
        // Two buckets, each with an entry that overflowed into the other, and free slots:
        // a search for a key that is not there must stop after both.
        let mut index = KeyIndex::default();
        let home = |b: u64, n: u32| b | (u64::from(n + 1) << 48);
        let mut id = 0;
        let mut add = |index: &mut KeyIndex, b: u64| {
            id += 1;
            index.insert(home(b, id), id, |_| unreachable!("no growth"));
            id
        };
        let zeros: Vec<u32> = (0..11).map(|_| add(&mut index, 0)).collect();
        for _ in 0..6 {
            add(&mut index, 1);
        }
        assert_eq!(index.buckets.len(), 2);
        for &z in &zeros[..5] {
            assert!(index.remove(home(0, z), z));
        }
        for _ in 0..4 {
            add(&mut index, 1);
        }
        assert_eq!(index.buckets.len(), 2);
        assert!(
            index.buckets.iter().all(|b| b.overflow > 0),
            "{:?}",
            index.buckets
        );
        assert_eq!(index.find(home(0, 999), |_| true), None);
        assert_eq!(index.find(home(1, 999), |_| true), None);
        assert!(!index.remove(home(1, 999), 999));
        assert_eq!(
            index.find(home(0, zeros[10]), |i| i == zeros[10]),
            Some(zeros[10])
        );
    }

    proptest! {
        #[test]
        fn inserts_and_removes_agree_with_a_map(ops in prop::collection::vec((any::<bool>(), any::<u16>()), 0..2000)) {
            run(&ops, spread);
        }

        #[test]
        fn crowded_hashes_chain_and_unchain(ops in prop::collection::vec((any::<bool>(), any::<u16>()), 0..2000)) {
            run(&ops, crowded);
        }
    }
}

//! `BlockMap`: a map from the simulator's block numbers to small values, for the indexes
//! that every simulated read looks up (the cache devices' copies).
//!
//! Data blocks are numbered densely from 0, so they live in pages of consecutive slots,
//! allocated as the first block of each page is inserted: a lookup is one load of a slot
//! (the short table of pages stays in the CPU's caches), where a hash map costs two (its
//! control bytes, then the entry) and twice the memory at its load factor. That lookup was
//! the simulator's hottest one, since the index grows far beyond the CPU's caches. Each
//! page also holds one bit per block saying whether it has a value: the questions asked
//! most (is this evicted block on a cache device? is this cold block there already, or
//! should the feed write it?) read only that bit, and the bits of a whole data set stay in
//! the CPU's caches where its slots do not (78 KiB for seed 000 at 1/100). Any other number
//! (an indirect block's id, whose top bit is set, or a block beyond `DENSE_BLOCKS`) goes to
//! a hash map, so a far block never allocates a table of pages up to it.

use rustc_hash::FxHashMap as HashMap;

/// Slots per page: 4,096 (32 KiB of 8-byte values).
const PAGE_SHIFT: u32 = 12;
const PAGE_SLOTS: usize = 1 << PAGE_SHIFT;
/// Block numbers below this are kept in pages: 2^36 blocks, 32 TiB of 512-byte blocks, a
/// table of pages of at most 128 MiB.
const DENSE_BLOCKS: u64 = 1 << 36;

/// 4,096 consecutive blocks' slots, and their presence bits (bit `s % 64` of word `s / 64`
/// for slot `s`): a slot holds a value only while its bit is set (else the default), so a
/// value needs no `Option` beside it and an 8-byte value takes 8 bytes.
struct Page<V> {
    present: [u64; PAGE_SLOTS / 64],
    slots: [V; PAGE_SLOTS],
}

impl<V> Page<V> {
    fn has(&self, slot: usize) -> bool {
        self.present[slot / 64] & (1 << (slot % 64)) != 0
    }
}

/// A map from block number to `V`. Iteration order is unspecified: callers only sum and
/// count over it, so nothing they report depends on the order.
pub struct BlockMap<V> {
    pages: Vec<Option<Box<Page<V>>>>,
    sparse: HashMap<u64, V>,
    len: usize,
}

impl<V> Default for BlockMap<V> {
    fn default() -> BlockMap<V> {
        BlockMap {
            pages: Vec::new(),
            sparse: HashMap::default(),
            len: 0,
        }
    }
}

/// The page of a dense block, its slot there, and the slot's presence bit.
fn split(block: u64) -> (usize, usize, u64) {
    let slot = (block as usize) & (PAGE_SLOTS - 1);
    ((block >> PAGE_SHIFT) as usize, slot, 1 << (slot % 64))
}

/// Starts loading the cache line of `value` (a hint: no effect on other targets).
fn prefetch_line<T>(value: &T) {
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

impl<V: Copy + Default> BlockMap<V> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    fn page(&self, page: usize) -> Option<&Page<V>> {
        self.pages.get(page)?.as_deref()
    }

    /// The value of `block`.
    pub fn get(&self, block: u64) -> Option<&V> {
        if block >= DENSE_BLOCKS {
            return self.sparse.get(&block);
        }
        let (page, slot, _) = split(block);
        let page = self.page(page)?;
        // The bit first: an absent block costs no load of its slot.
        page.has(slot).then(|| &page.slots[slot])
    }

    /// The value of `block`, to change in place.
    pub fn get_mut(&mut self, block: u64) -> Option<&mut V> {
        if block >= DENSE_BLOCKS {
            return self.sparse.get_mut(&block);
        }
        let (page, slot, _) = split(block);
        let page = self.pages.get_mut(page)?.as_mut()?;
        page.has(slot).then(|| &mut page.slots[slot])
    }

    /// Whether `block` has a value.
    pub fn contains_key(&self, block: u64) -> bool {
        if block >= DENSE_BLOCKS {
            return self.sparse.contains_key(&block);
        }
        let (page, slot, _) = split(block);
        self.page(page).is_some_and(|page| page.has(slot))
    }

    /// Sets the value of `block`; returns the one it replaces.
    pub fn insert(&mut self, block: u64, value: V) -> Option<V> {
        let old = if block >= DENSE_BLOCKS {
            self.sparse.insert(block, value)
        } else {
            let (page, slot, bit) = split(block);
            if self.pages.len() <= page {
                self.pages.resize_with(page + 1, || None);
            }
            let page = self.pages[page].get_or_insert_with(|| {
                Box::new(Page {
                    present: [0; PAGE_SLOTS / 64],
                    slots: [V::default(); PAGE_SLOTS],
                })
            });
            let old = page.has(slot).then_some(page.slots[slot]);
            page.present[slot / 64] |= bit;
            page.slots[slot] = value;
            old
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the value of `block` and returns it.
    pub fn remove(&mut self, block: u64) -> Option<V> {
        let old = if block >= DENSE_BLOCKS {
            self.sparse.remove(&block)
        } else {
            let (page, slot, bit) = split(block);
            let page = self.pages.get_mut(page)?.as_mut()?;
            let old = page
                .has(slot)
                .then(|| std::mem::take(&mut page.slots[slot]));
            page.present[slot / 64] &= !bit;
            old
        };
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Asks the CPU to bring `block`'s slot into its caches without waiting for it, for a
    /// lookup that comes after other work that waits for memory. Changes nothing.
    pub fn prefetch(&self, block: u64) {
        if block >= DENSE_BLOCKS {
            return;
        }
        let (page, slot, _) = split(block);
        if let Some(page) = self.page(page) {
            prefetch_line(&page.slots[slot]);
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let dense = self
            .pages
            .iter()
            .enumerate()
            .filter_map(|(p, page)| page.as_ref().map(|page| (p, page)))
            .flat_map(|(p, page)| {
                page.slots
                    .iter()
                    .enumerate()
                    .filter(|&(s, _)| page.has(s))
                    .map(move |(s, v)| (((p as u64) << PAGE_SHIFT) | s as u64, v))
            });
        dense.chain(self.sparse.iter().map(|(&b, v)| (b, v)))
    }

    /// Every block with a value, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(b, _)| b)
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::workload::SplitMix64;

    /// Random inserts, removals and lookups against a `BTreeMap`, over data blocks, far
    /// blocks and indirect ids.
    #[test]
    fn agrees_with_a_btreemap() {
        let mut rng = SplitMix64::new(37);
        let mut map = BlockMap::default();
        let mut model = BTreeMap::new();
        let pick = |r: u64| match r % 5 {
            0 => r % 10_000,
            1 => DENSE_BLOCKS + r % 100,
            2 => (1 << 30) + r % 100,
            3 => (1 << 63) | (r % 300),
            _ => r % 100,
        };
        for step in 0..20_000u64 {
            let block = pick(rng.next_u64());
            match rng.next_u64() % 3 {
                0 => assert_eq!(map.insert(block, step), model.insert(block, step)),
                1 => assert_eq!(map.remove(block), model.remove(&block)),
                _ => {
                    if let Some(v) = map.get_mut(block) {
                        *v += 1;
                    }
                    if let Some(v) = model.get_mut(&block) {
                        *v += 1;
                    }
                }
            }
            assert_eq!(map.get(block), model.get(&block), "block {block}");
            assert_eq!(map.contains_key(block), model.contains_key(&block));
            assert_eq!(map.len(), model.len());
        }
        let mut all: Vec<(u64, u64)> = map.iter().map(|(b, &v)| (b, v)).collect();
        all.sort_unstable();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        assert!(map.keys().count() == map.len() && map.values().count() == map.len());
    }
}

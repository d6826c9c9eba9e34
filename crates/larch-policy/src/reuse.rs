//! How often each block was read lately, in four bytes per block of the window it covers:
//! the evidence the L2 feed's admission rule (`l2arc_admit`, [`crate::feed::FeedRules`])
//! reads to leave blocks that are read once and never again off the cache devices, and
//! that the larch policy's MFU admission reads (a second sketch, of the reads that find
//! no header only, over
//! [`crate::FREQ_WINDOW_PER_BLOCK`] cache sizes: `Arc::mfu_sketch_bytes`).
//!
//! A count-min sketch of 4-bit counters, as TinyLFU keeps one: a block's reads add to
//! four counters chosen by its key's hash, and its count is the smallest of the four (other
//! blocks sharing a counter can only raise it). An increment raises only the counters at
//! that minimum ("conservative update"), which keeps the blocks a counter is shared with
//! from inflating each other. All counters halve once as many reads as
//! [`PERIOD_PER_BLOCK`] times the window's blocks have been counted, so a count says "read
//! n times lately", not "ever", and a block's first read is remembered for one to two
//! periods: five window-fulls of reads, long enough for a block evicted from the ARC and
//! read again after a cache device's worth of other blocks to show its second read.
//!
//! It also counts the reads that find their block's count at 0 and at 1: whether blocks
//! read once lately tend to be read again ([`ReuseSketch::blocks_read_once_return`]). Where
//! they do (a working set read over and over after it appears), the admission rule feeds
//! them after all: holding them back would only cost the hit of their second read.
//!
//! The sizes were measured (`bench/l2_admission.py`, BENCHMARKS.md "Issue 40"; before the
//! one-in-four rule): with 2 bytes per block and 30 window-fulls per period the counters
//! fill up (every block looks read twice, and the rule skips little: wasted feed -35% over
//! the suite); 2 bytes and ten gave -68% with 0.8% more L2 hits than feeding everything,
//! and three, -76% and 0.5% more; 4 bytes and five, -83% and 1.4% more; 8 bytes and ten,
//! -81% and 1.8% more. Shorter periods cut more waste and lose the hits of blocks read
//! again after longer gaps.
//!
//! Layout: each block's four counters lie in one 64-bit word (16 counters of 4 bits), so a
//! read touches one cache line; the word and the four counters within it come from
//! different bits of one hash. The table holds one word per 2 blocks of the window, and its
//! size is a power of two. Memory: 4 bytes per block of the window, rounded up to a power
//! of two (and never more than [`MAX_WORDS`] words).

use crate::BlockKey;

/// Reads counted, per block of the window, before every counter halves.
pub const PERIOD_PER_BLOCK: u64 = 5;

/// Blocks of the window one 64-bit word of counters serves.
pub const BLOCKS_PER_WORD: u64 = 2;

/// The largest table, in words (512 MiB): a window beyond 2^27 blocks shares counters more.
pub const MAX_WORDS: u64 = 1 << 26;

/// Smallest table, in words.
const MIN_WORDS: u64 = 16;

/// Blocks read once lately come back often enough to be fed when at least one in this
/// many is read again within the sketch's memory. Measured over the policy suite
/// (BENCHMARKS.md "Issue 40", "L2ARC admission"): with 2, 3 and 4 the shifting working
/// sets lost 2.5, 0.3 and no points of L2 hit ratio; 4 feeds more of Zipf's tail
/// (wasted feed -52% there instead of -81%).
pub const RETURN_RATIO: u64 = 4;

/// The largest count a counter holds.
pub const MAX_COUNT: u8 = 15;

/// Keeps the low three bits of each 4-bit counter after a shift right by one.
const HALVE_MASK: u64 = 0x7777_7777_7777_7777;

/// The window of each of `shards` ARCs that split a cache of `arc_max_bytes` in DRAM and
/// `l2_bytes` on cache devices, in blocks of `block_bytes`: the blocks one shard may hold
/// at once, in DRAM or on a cache device (at least 1).
pub fn shard_window_blocks(
    arc_max_bytes: u64,
    l2_bytes: u64,
    block_bytes: u64,
    shards: u64,
) -> u64 {
    (arc_max_bytes.saturating_add(l2_bytes) / block_bytes.max(1) / shards.max(1)).max(1)
}

/// Makes `sketch` serve a window of `window_blocks` blocks: the table it has (and its
/// counts) when the window fits it ([`ReuseSketch::fits`]), a new one otherwise or when
/// there is none.
pub fn serve_window(sketch: &mut Option<Box<ReuseSketch>>, window_blocks: u64) {
    match sketch.as_mut() {
        Some(s) if s.fits(window_blocks) => s.set_window(window_blocks),
        _ => *sketch = Some(Box::new(ReuseSketch::new(window_blocks))),
    }
}

/// The reads of the blocks of a window, counted approximately. See the module comment.
#[derive(Clone, Debug)]
pub struct ReuseSketch {
    words: Box<[u64]>,
    window_blocks: u64,
    counted: u64,
    period: u64,
    /// Reads that found their block's count at 0 (a first read lately) and at 1 (a second),
    /// halved with the counters.
    firsts: u64,
    seconds: u64,
}

impl ReuseSketch {
    /// A sketch for a window of `window_blocks` blocks: the blocks that may be cached at
    /// once (the ARC and its cache devices), whose reads it must tell apart.
    pub fn new(window_blocks: u64) -> ReuseSketch {
        let words = Self::words_for(window_blocks);
        ReuseSketch {
            words: vec![0u64; words as usize].into_boxed_slice(),
            window_blocks,
            counted: 0,
            period: window_blocks.max(1).saturating_mul(PERIOD_PER_BLOCK),
            firsts: 0,
            seconds: 0,
        }
    }

    /// The table's size, in words, for a window of `window_blocks` blocks.
    fn words_for(window_blocks: u64) -> u64 {
        (window_blocks / BLOCKS_PER_WORD)
            .clamp(MIN_WORDS, MAX_WORDS)
            .next_power_of_two()
    }

    /// Whether a window of `window_blocks` blocks takes a table of this one's size.
    pub fn fits(&self, window_blocks: u64) -> bool {
        Self::words_for(window_blocks) == self.words.len() as u64
    }

    /// Serves a window of `window_blocks` blocks with the same table ([`Self::fits`]): the
    /// counts stay, and the period before they halve follows the window.
    pub fn set_window(&mut self, window_blocks: u64) {
        self.window_blocks = window_blocks;
        self.period = window_blocks.max(1).saturating_mul(PERIOD_PER_BLOCK);
        if self.counted >= self.period {
            self.halve();
        }
    }

    /// Reads counted lately (halved with the counters) that found their block's count at
    /// 0, a first read, and at 1, a second.
    pub fn first_and_second_reads(&self) -> (u64, u64) {
        (self.firsts, self.seconds)
    }

    /// The window it serves.
    pub fn window_blocks(&self) -> u64 {
        self.window_blocks
    }

    /// Bytes of DRAM its counters take.
    pub fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// The word and the four counters (bit offsets within it) of `key`.
    fn slots(&self, key: &BlockKey) -> (usize, [u32; 4]) {
        self.slots_hashed(crate::list::hash_key(key))
    }

    /// [`Self::slots`] of the key whose index hash is `h`.
    fn slots_hashed(&self, h: u64) -> (usize, [u32; 4]) {
        // The word from the high bits, the counters from the low 16, which the word's
        // index does not use while the table is under 2^48 words.
        let word = (h >> 16) as usize & (self.words.len() - 1);
        let shifts = [0u32, 4, 8, 12].map(|s| ((h >> s) as u32 & 15) * 4);
        (word, shifts)
    }

    /// The count of `key`: how many times it was read lately (an upper bound: never
    /// less than the reads counted since its counters last halved, divided by the
    /// halvings since).
    pub fn count(&self, key: &BlockKey) -> u8 {
        let (word, shifts) = self.slots(key);
        let w = self.words[word];
        shifts
            .iter()
            .map(|&s| ((w >> s) & 15) as u8)
            .min()
            .unwrap_or(0)
    }

    /// Starts loading the word that holds `key`'s counters: a hint to the CPU for a
    /// caller that knows its next key while it has other work to do.
    pub fn prefetch(&self, key: &BlockKey) {
        self.prefetch_hashed(crate::list::hash_key(key));
    }

    /// [`Self::prefetch`] for a caller that has the key's index hash already.
    pub(crate) fn prefetch_hashed(&self, hash: u64) {
        crate::index::prefetch_line(&self.words[self.slots_hashed(hash).0]);
    }

    /// Counts one read of `key`. Returns its count with this read (as [`Self::count`]
    /// would have said just before the counters halved, if they did on it) and whether
    /// they did.
    pub fn record(&mut self, key: &BlockKey) -> (u8, bool) {
        self.record_hashed(crate::list::hash_key(key))
    }

    /// [`Self::record`] for a caller that has the key's index hash already.
    pub(crate) fn record_hashed(&mut self, hash: u64) -> (u8, bool) {
        let (word, shifts) = self.slots_hashed(hash);
        let w = self.words[word];
        let least = shifts.iter().map(|&s| (w >> s) & 15).min().unwrap_or(0);
        match least {
            0 => self.firsts += 1,
            1 => self.seconds += 1,
            _ => {}
        }
        let count = (least + 1).min(u64::from(MAX_COUNT)) as u8;
        if least < u64::from(MAX_COUNT) {
            let mut raised = w;
            for &s in &shifts {
                // Two of the four may be the same counter: raise it once.
                if (w >> s) & 15 == least && (raised >> s) & 15 == least {
                    raised += 1 << s;
                }
            }
            self.words[word] = raised;
        }
        self.counted += 1;
        let halves = self.counted >= self.period;
        if halves {
            self.halve();
        }
        (count, halves)
    }

    /// Halves every counter: the reads counted so far weigh half as much from now on.
    fn halve(&mut self) {
        for w in self.words.iter_mut() {
            *w = (*w >> 1) & HALVE_MASK;
        }
        self.counted /= 2;
        self.firsts /= 2;
        self.seconds /= 2;
    }

    /// Whether blocks read once lately are read again often: at least one second read
    /// for every [`RETURN_RATIO`] first reads counted (a read finding its block's count at
    /// 0, then at 1), over the sketch's memory.
    pub fn blocks_read_once_return(&self) -> bool {
        self.seconds.saturating_mul(RETURN_RATIO) >= self.firsts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(block: u64) -> BlockKey {
        BlockKey::new(7, block)
    }

    #[test]
    fn counts_reads_and_saturates() {
        let mut s = ReuseSketch::new(1 << 16);
        assert_eq!(s.count(&key(1)), 0);
        assert_eq!(s.record(&key(1)), (1, false), "the count with this read");
        assert_eq!(s.count(&key(1)), 1);
        assert_eq!(s.record(&key(1)), (2, false));
        assert_eq!(s.count(&key(1)), 2);
        for _ in 0..40 {
            s.record(&key(1));
        }
        assert_eq!(s.count(&key(1)), MAX_COUNT);
        assert_eq!(s.count(&key(2)), 0);
    }

    #[test]
    fn a_period_of_reads_halves_every_count() {
        let window = 1000;
        let mut s = ReuseSketch::new(window);
        for _ in 0..6 {
            s.record(&key(1));
        }
        // Other blocks, each read once, until the period ends.
        let mut b = 100;
        while s.counted != 0 && s.counted < window * PERIOD_PER_BLOCK - 1 {
            s.record(&key(b));
            b += 1;
        }
        assert_eq!(s.count(&key(1)), 6);
        assert!(s.record(&key(b)).1, "the read that ends the period halves");
        assert_eq!(s.count(&key(1)), 3);
        assert_eq!(s.counted, window * PERIOD_PER_BLOCK / 2);
    }

    #[test]
    fn blocks_read_once_rarely_look_read_twice() {
        // A window's worth of blocks, each read once: few collide into a count of 2
        // (2.3% here).
        let window = 1 << 14;
        let mut s = ReuseSketch::new(window);
        for b in 0..window {
            s.record(&key(b));
        }
        let twice = (0..window).filter(|b| s.count(&key(*b)) >= 2).count();
        assert!(
            (twice as u64) < window / 25,
            "{twice} of {window} blocks read once count 2 or more"
        );
        // And a block read twice always counts at least 2 (counts never undercount
        // before a halving).
        for b in 0..window {
            s.record(&key(b + window));
            s.record(&key(b + window));
            assert!(s.count(&key(b + window)) >= 2);
        }
    }

    #[test]
    fn blocks_read_once_return_when_one_in_four_is_read_again() {
        let mut s = ReuseSketch::new(1 << 16);
        for b in 0..100 {
            s.record(&key(b));
        }
        assert_eq!(s.first_and_second_reads(), (100, 0));
        assert!(!s.blocks_read_once_return());
        for b in 0..24 {
            s.record(&key(b));
        }
        assert!(!s.blocks_read_once_return(), "24 of 100");
        s.record(&key(24));
        assert_eq!(s.first_and_second_reads(), (100, 25));
        assert!(s.blocks_read_once_return(), "25 of 100");
        // Third reads count as neither.
        s.record(&key(0));
        assert_eq!(s.first_and_second_reads(), (100, 25));
    }

    #[test]
    fn memory_is_four_bytes_per_block_of_the_window() {
        assert_eq!(ReuseSketch::new(1 << 20).bytes(), 4 << 20);
        assert_eq!(ReuseSketch::new(0).bytes(), MIN_WORDS * 8);
        assert_eq!(ReuseSketch::new(u64::MAX).bytes(), MAX_WORDS * 8);
    }
}

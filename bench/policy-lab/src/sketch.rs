//! A count-min sketch of 4-bit counters with periodic halving (TinyLFU's frequency
//! estimate): 4 rows of `width` counters, `width` the cache size rounded up to a power of
//! two; after 10 x width additions every counter is halved, so old popularity fades.

pub struct Sketch {
    counters: Vec<u8>,
    mask: u64,
    width: usize,
    additions: u64,
    period: u64,
}

const ROWS: usize = 4;
const MAX: u8 = 15;

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Sketch {
    pub fn new(cache_blocks: u64) -> Sketch {
        let width = cache_blocks.max(16).next_power_of_two() as usize;
        Sketch {
            counters: vec![0; width * ROWS],
            mask: width as u64 - 1,
            width,
            additions: 0,
            period: 10 * width as u64,
        }
    }

    fn slot(&self, x: u32, row: usize) -> usize {
        let h =
            mix(u64::from(x).wrapping_add(0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(row as u64 + 1)));
        row * self.width + (h & self.mask) as usize
    }

    /// The estimated number of recent accesses of `x`.
    pub fn frequency(&self, x: u32) -> u8 {
        (0..ROWS)
            .map(|r| self.counters[self.slot(x, r)])
            .min()
            .unwrap_or(0)
    }

    /// Counts one access of `x` (conservative update: only the smallest counters grow).
    pub fn add(&mut self, x: u32) {
        let f = self.frequency(x);
        if f < MAX {
            for row in 0..ROWS {
                let i = self.slot(x, row);
                if self.counters[i] == f {
                    self.counters[i] += 1;
                }
            }
        }
        self.additions += 1;
        if self.additions >= self.period {
            for c in &mut self.counters {
                *c >>= 1;
            }
            self.additions /= 2;
        }
    }
}

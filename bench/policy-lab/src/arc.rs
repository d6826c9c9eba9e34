//! The paper's ARC over unit-size blocks (libCacheSim's object mode), with the changes the
//! lab measures, each off by default:
//! - `marks`: an MFU block counts its hits (up to 3); eviction from MFU gives a marked
//!   block another pass (mark - 1, back to the hot end) instead of dropping it, as
//!   S3-FIFO's main queue does;
//! - `insert`: where a new block (no ghost) enters MRU: the hot end (the paper), the cold
//!   end except one block in 32 (bimodal insertion: a loop longer than the cache keeps
//!   most of what it holds instead of nothing), or the cold end unless the frequency sketch
//!   says it is more popular than the block the next replacement would take (TinyLFU's
//!   admission turned into a position);
//! - `duel`: when MRU gives up its coldest block, it goes to MFU instead if the sketch
//!   says it is more popular than MFU's coldest, which then leaves;
//! - `sketch_to_mfu`: a new block the sketch has seen this often enters MFU directly.

use crate::choose::Candidate;
use crate::lists::{B1, B2, Lists, T1, T2};
use crate::sketch::Sketch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    Hot,
    ColdBimodal,
    ColdUnlessFrequent,
}

#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub marks: bool,
    pub insert: Insert,
    pub duel: bool,
    pub sketch_to_mfu: u8,
    /// With a cold insertion, room is always made in MRU first.
    pub cold_takes_mru: bool,
    /// Bimodal insertion puts one new block in this many at the hot end.
    pub hot_every: u64,
}

impl Options {
    pub const PAPER: Options = Options {
        marks: false,
        insert: Insert::Hot,
        duel: false,
        sketch_to_mfu: 0,
        cold_takes_mru: false,
        hot_every: 32,
    };

    fn needs_sketch(&self) -> bool {
        self.duel || self.sketch_to_mfu > 0 || self.insert == Insert::ColdUnlessFrequent
    }
}

pub struct Arc {
    c: u64,
    /// The paper's target for MRU, in blocks (real-valued, as the paper's).
    p: f64,
    lists: Lists,
    marks: Vec<u8>,
    sketch: Option<Sketch>,
    pub options: Options,
    inserted: u64,
}

impl Arc {
    /// An ARC of `c` blocks over ids below `ids`. The sketch is kept whenever `sketch` is
    /// set, so a caller may switch `options.insert` later.
    pub fn new(c: u64, ids: usize, options: Options, sketch: bool) -> Arc {
        Arc {
            c: c.max(1),
            p: 0.0,
            lists: Lists::new(ids),
            marks: vec![0; if options.marks { ids } else { 0 }],
            sketch: (sketch || options.needs_sketch()).then(|| Sketch::new(c)),
            options,
            inserted: 0,
        }
    }

    fn frequency(&self, x: u32) -> u8 {
        self.sketch.as_ref().map_or(0, |s| s.frequency(x))
    }

    fn mark(&mut self, x: u32, value: u8) {
        if self.options.marks {
            self.marks[x as usize] = value;
        }
    }

    /// The block the next replacement would take, as `replace` chooses.
    fn next_victim(&self, in_b2: bool) -> Option<u32> {
        let t1 = self.lists.len(T1);
        if t1 > 0 && (t1 as f64 > self.p || (in_b2 && t1 as f64 == self.p))
            || self.lists.len(T2) == 0
        {
            self.lists.coldest(T1)
        } else {
            self.lists.coldest(T2)
        }
    }

    fn evict_mfu(&mut self) {
        while let Some(y) = self.lists.coldest(T2) {
            if self.options.marks && self.marks[y as usize] > 0 {
                self.marks[y as usize] -= 1;
                self.lists.push_hot(y, T2);
                continue;
            }
            self.lists.push_hot(y, B2);
            return;
        }
    }

    /// The paper's REPLACE: make room for one block.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.lists.len(T1);
        let cold_first = self.options.cold_takes_mru && self.options.insert != Insert::Hot;
        if t1 > 0 && (cold_first || t1 as f64 > self.p || (in_b2 && t1 as f64 == self.p))
            || self.lists.len(T2) == 0
        {
            let Some(x) = self.lists.coldest(T1) else {
                return;
            };
            if self.options.duel
                && let Some(y) = self.lists.coldest(T2)
                && self.frequency(x) > self.frequency(y)
            {
                self.mark(x, 0);
                self.lists.push_hot(x, T2);
                self.lists.push_hot(y, B2);
                return;
            }
            self.lists.push_hot(x, B1);
        } else {
            self.evict_mfu();
        }
    }

    /// One access; true for a hit.
    pub fn access(&mut self, x: u32) -> bool {
        if let Some(s) = self.sketch.as_mut() {
            s.add(x);
        }
        let c = self.c;
        match self.lists.state(x) {
            T1 => {
                self.lists.push_hot(x, T2);
                true
            }
            T2 => {
                if self.options.marks && self.marks[x as usize] < 3 {
                    self.marks[x as usize] += 1;
                }
                self.lists.push_hot(x, T2);
                true
            }
            B1 => {
                let step = (self.lists.len(B2) as f64 / self.lists.len(B1) as f64).max(1.0);
                self.p = (self.p + step).min(c as f64);
                self.replace(false);
                self.mark(x, 0);
                self.lists.push_hot(x, T2);
                false
            }
            B2 => {
                let step = (self.lists.len(B1) as f64 / self.lists.len(B2) as f64).max(1.0);
                self.p = (self.p - step).max(0.0);
                self.replace(true);
                self.mark(x, 0);
                self.lists.push_hot(x, T2);
                false
            }
            _ => {
                let (t1, b1) = (self.lists.len(T1), self.lists.len(B1));
                let total = t1 + b1 + self.lists.len(T2) + self.lists.len(B2);
                if t1 + b1 >= c {
                    if t1 < c {
                        if let Some(y) = self.lists.coldest(B1) {
                            self.lists.remove(y);
                        }
                        self.replace(false);
                    } else if let Some(y) = self.lists.coldest(T1) {
                        self.lists.remove(y);
                    }
                } else if total >= c {
                    if total >= 2 * c
                        && let Some(y) = self.lists.coldest(B2)
                    {
                        self.lists.remove(y);
                    }
                    self.replace(false);
                }
                self.mark(x, 0);
                self.insert_new(x);
                false
            }
        }
    }

    fn insert_new(&mut self, x: u32) {
        let f = self.frequency(x);
        if self.options.sketch_to_mfu > 0 && f >= self.options.sketch_to_mfu {
            self.lists.push_hot(x, T2);
            return;
        }
        self.inserted += 1;
        let cold = match self.options.insert {
            Insert::Hot => false,
            Insert::ColdBimodal => !self.inserted.is_multiple_of(self.options.hot_every),
            Insert::ColdUnlessFrequent => self
                .next_victim(false)
                .is_some_and(|v| f <= self.frequency(v)),
        };
        if cold {
            self.lists.push_cold(x, T1);
        } else {
            self.lists.push_hot(x, T1);
        }
    }
}

impl Candidate for Arc {
    type Rules = Options;

    fn build(c: u64, ids: usize, options: Options) -> Arc {
        Arc::new(c, ids, options, true)
    }

    fn access(&mut self, x: u32) -> bool {
        Arc::access(self, x)
    }

    fn set_rules(&mut self, options: Options) {
        self.options = options;
    }
}

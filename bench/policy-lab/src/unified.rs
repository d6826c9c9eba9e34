//! One ARC-shaped cache (MRU, MFU and their ghosts, the paper's adaptive target `p`)
//! whose rules can be changed while it runs, so that a chooser can move it between
//! behaviours without moving any block: ARC's, S3-FIFO's and W-TinyLFU's expressed over
//! the same four lists.
//!
//! - MRU (T1) is where a block without history enters; MFU (T2) holds blocks seen again.
//! - A ghost hit (B1 or B2) moves `p` as the paper does, in every rule set, and enters MFU.
//! - MFU counts hits per block (a mark, up to 3); evicting from MFU gives a marked block
//!   another pass instead of dropping it (S3-FIFO's main queue).
//! - Ghost lists are bounded as the paper's directory: MRU + B1 <= c, everything <= 2c.

use crate::choose::Candidate;
use crate::lists::{B1, B2, Lists, T1, T2};
use crate::sketch::Sketch;

/// What the cache does with each event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// New blocks enter MRU at its cold end (next to leave) instead of its hot end.
    pub insert_cold: bool,
    /// An MRU hit marks the block instead of promoting it; a marked block is promoted when
    /// it reaches MRU's cold end (S3-FIFO's lazy promotion).
    pub lazy_promotion: bool,
    /// With lazy promotion, an MRU hit also moves the block to MRU's hot end (an LRU
    /// window, as W-TinyLFU's); otherwise MRU is a FIFO.
    pub mru_hit_moves: bool,
    /// An MFU hit moves the block to MFU's hot end (LRU); otherwise MFU is a FIFO with
    /// marks (CLOCK).
    pub mfu_hit_moves: bool,
    /// MRU's share of the cache, fixed; `None` takes the paper's adaptive `p`.
    pub mru_share: Option<f64>,
    /// Room is made in MRU whenever MRU holds anything.
    pub mru_first: bool,
    /// A block leaving MRU enters MFU instead when the sketch says it is more popular
    /// than MFU's next victim, which leaves in its place (TinyLFU's admission).
    pub duel: bool,
    /// While the cache is not full, MRU beyond its target hands its coldest block to
    /// MFU (S3-FIFO and W-TinyLFU fill their main queue this way; ARC leaves MFU empty
    /// until something is seen twice).
    pub fill_mfu: bool,
    /// Blocks handed to MFU by `fill_mfu` go to its cold end (the first to leave).
    pub fill_cold: bool,
    /// A block without history that the sketch has seen at least this often (counting
    /// this access) enters MFU as a ghost hit would; 0: never.
    pub sketch_mfu: u8,
}

impl Rules {
    /// The paper's ARC with marks in MFU.
    pub const ARC: Rules = Rules {
        insert_cold: false,
        lazy_promotion: false,
        mru_hit_moves: false,
        mfu_hit_moves: true,
        mru_share: None,
        mru_first: false,
        duel: false,
        fill_mfu: false,
        fill_cold: false,
        sketch_mfu: 0,
    };
    /// S3-FIFO: a small FIFO (10%), lazy promotion, a CLOCK main, ghosts into main.
    pub const S3FIFO: Rules = Rules {
        insert_cold: false,
        lazy_promotion: true,
        mru_hit_moves: false,
        mfu_hit_moves: false,
        mru_share: Some(0.1),
        mru_first: false,
        duel: false,
        fill_mfu: true,
        fill_cold: false,
        sketch_mfu: 0,
    };
    /// W-TinyLFU: a 1% LRU window whose leavers duel MFU's victim by frequency.
    pub const WTINYLFU: Rules = Rules {
        insert_cold: false,
        lazy_promotion: true,
        mru_hit_moves: true,
        mfu_hit_moves: true,
        mru_share: Some(0.01),
        mru_first: false,
        duel: true,
        fill_mfu: true,
        fill_cold: false,
        sketch_mfu: 0,
    };
    /// Loop-resistant: new blocks at MRU's cold end, room made there first.
    pub const COLD: Rules = Rules {
        insert_cold: true,
        lazy_promotion: false,
        mru_hit_moves: false,
        mfu_hit_moves: true,
        mru_share: None,
        mru_first: true,
        duel: false,
        fill_mfu: false,
        fill_cold: false,
        sketch_mfu: 0,
    };
}

pub struct Cache {
    c: u64,
    p: f64,
    lists: Lists,
    marks: Vec<u8>,
    sketch: Sketch,
    pub rules: Rules,
}

impl Cache {
    pub fn new(c: u64, ids: usize, rules: Rules) -> Cache {
        let c = c.max(1);
        Cache {
            c,
            p: 0.0,
            lists: Lists::new(ids),
            marks: vec![0; ids],
            sketch: Sketch::new(c),
            rules,
        }
    }

    fn resident(&self) -> u64 {
        self.lists.len(T1) + self.lists.len(T2)
    }

    fn mru_target(&self) -> f64 {
        match self.rules.mru_share {
            Some(share) => (share * self.c as f64).max(1.0),
            None => self.p,
        }
    }

    /// MFU's next victim after second chances, without changing anything.
    fn mfu_victim(&self) -> Option<u32> {
        self.lists.coldest(T2)
    }

    fn evict_mfu(&mut self) {
        while let Some(y) = self.lists.coldest(T2) {
            if self.marks[y as usize] > 0 {
                self.marks[y as usize] -= 1;
                self.lists.push_hot(y, T2);
                continue;
            }
            self.lists.push_hot(y, B2);
            return;
        }
    }

    /// Makes room for one block.
    fn evict_one(&mut self, from_b2: bool) {
        loop {
            let t1 = self.lists.len(T1);
            let target = self.mru_target();
            let take_mru = t1 > 0
                && (self.rules.mru_first
                    || t1 as f64 > target
                    || (from_b2 && t1 as f64 == target)
                    || self.lists.len(T2) == 0);
            if !take_mru {
                self.evict_mfu();
                return;
            }
            let x = self.lists.coldest(T1).expect("MRU is not empty");
            if self.rules.lazy_promotion && self.marks[x as usize] > 0 {
                self.marks[x as usize] = 0;
                self.lists.push_hot(x, T2);
                continue;
            }
            if self.rules.duel
                && let Some(y) = self.mfu_victim()
                && self.sketch.frequency(x) > self.sketch.frequency(y)
            {
                self.marks[x as usize] = 0;
                self.lists.push_hot(x, T2);
                self.lists.push_hot(y, B2);
                return;
            }
            self.lists.push_hot(x, B1);
            return;
        }
    }

    fn trim_ghosts(&mut self) {
        while self.lists.len(T1) + self.lists.len(B1) > self.c {
            match self.lists.coldest(B1) {
                Some(g) => self.lists.remove(g),
                None => break,
            }
        }
        let total = |l: &Lists| l.len(T1) + l.len(T2) + l.len(B1) + l.len(B2);
        while total(&self.lists) > 2 * self.c {
            match self.lists.coldest(B2).or(self.lists.coldest(B1)) {
                Some(g) => self.lists.remove(g),
                None => break,
            }
        }
    }

    /// One access; true for a hit.
    pub fn access(&mut self, x: u32) -> bool {
        self.sketch.add(x);
        let hit = match self.lists.state(x) {
            T1 => {
                if self.rules.lazy_promotion {
                    self.marks[x as usize] = (self.marks[x as usize] + 1).min(3);
                    if self.rules.mru_hit_moves {
                        self.lists.push_hot(x, T1);
                    }
                } else {
                    self.marks[x as usize] = 0;
                    self.lists.push_hot(x, T2);
                }
                true
            }
            T2 => {
                self.marks[x as usize] = (self.marks[x as usize] + 1).min(3);
                if self.rules.mfu_hit_moves {
                    self.lists.push_hot(x, T2);
                }
                true
            }
            ghost @ (B1 | B2) => {
                let (b1, b2) = (self.lists.len(B1) as f64, self.lists.len(B2) as f64);
                if ghost == B1 {
                    self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
                } else {
                    self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
                }
                self.lists.remove(x);
                while self.resident() >= self.c {
                    self.evict_one(ghost == B2);
                }
                self.marks[x as usize] = 0;
                self.lists.push_hot(x, T2);
                false
            }
            _ => {
                if self.rules.fill_mfu
                    && self.resident() < self.c
                    && self.lists.len(T1) as f64
                        >= self.mru_target().max(self.c as f64 * fill_floor())
                    && let Some(y) = self.lists.coldest(T1)
                {
                    if self.rules.fill_cold {
                        self.lists.push_cold(y, T2);
                    } else {
                        self.lists.push_hot(y, T2);
                    }
                }
                while self.resident() >= self.c {
                    self.evict_one(false);
                }
                self.marks[x as usize] = 0;
                if self.rules.sketch_mfu > 0 && self.sketch.frequency(x) >= self.rules.sketch_mfu {
                    self.lists.push_hot(x, T2);
                } else if self.rules.insert_cold {
                    self.lists.push_cold(x, T1);
                } else {
                    self.lists.push_hot(x, T1);
                }
                false
            }
        };
        self.trim_ghosts();
        hit
    }
}

fn fill_floor() -> f64 {
    std::env::var("LAB_FILL_FLOOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

impl Candidate for Cache {
    type Rules = Rules;

    fn build(c: u64, ids: usize, rules: Rules) -> Cache {
        Cache::new(c, ids, rules)
    }

    fn access(&mut self, x: u32) -> bool {
        Cache::access(self, x)
    }

    fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }
}

//! A chooser over rule sets of the unified cache (unified.rs), by miniature simulation as
//! in adaptive.rs: one small cache per rule set on a hash-sampled share of the blocks
//! (all of them while the cache is at most `SAMPLE_BLOCKS`); every period of one small
//! cache's size in sampled accesses, the real cache takes the rules whose small cache hit
//! most, hits counted with halving.

use crate::sketch::mix;
use crate::unified::{Cache, Rules};

const SAMPLE_BLOCKS: u64 = 4096;

pub struct Chooser {
    main: Cache,
    candidates: Vec<Rules>,
    small: Vec<Cache>,
    scores: Vec<f64>,
    threshold: u64,
    sampled: u64,
    period: u64,
    current: usize,
    pub switches: u64,
}

impl Chooser {
    pub fn new(c: u64, ids: usize, candidates: &[Rules], period_share: f64) -> Chooser {
        let rate = if c <= SAMPLE_BLOCKS {
            1.0
        } else {
            SAMPLE_BLOCKS as f64 / c as f64
        };
        let small_c = ((c as f64 * rate).round() as u64).max(1);
        Chooser {
            main: Cache::new(c, ids, candidates[0]),
            candidates: candidates.to_vec(),
            small: candidates
                .iter()
                .map(|&r| Cache::new(small_c, ids, r))
                .collect(),
            scores: vec![0.0; candidates.len()],
            threshold: if rate >= 1.0 {
                u64::MAX
            } else {
                (rate * u64::MAX as f64) as u64
            },
            sampled: 0,
            period: ((small_c as f64 * period_share) as u64).max(32),
            current: 0,
            switches: 0,
        }
    }

    pub fn access(&mut self, x: u32) -> bool {
        if mix(u64::from(x) ^ 0x5151) <= self.threshold {
            for (score, cache) in self.scores.iter_mut().zip(&mut self.small) {
                if cache.access(x) {
                    *score += 1.0;
                }
            }
            self.sampled += 1;
            if self.sampled.is_multiple_of(self.period) {
                let best = (0..self.scores.len())
                    .max_by(|&a, &b| self.scores[a].total_cmp(&self.scores[b]))
                    .unwrap_or(self.current);
                if self.scores[best] > self.scores[self.current] {
                    self.current = best;
                    self.main.rules = self.candidates[best];
                    self.switches += 1;
                }
                for s in &mut self.scores {
                    *s *= 0.5;
                }
            }
        }
        self.main.access(x)
    }
}

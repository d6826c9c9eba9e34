//! Choosing MRU's insertion by miniature simulation: a sample of the blocks (by a hash of
//! the id; all of them while the cache is at most `SAMPLE_BLOCKS`) runs through one small
//! ARC per candidate insertion, each of the cache's size times the sampling rate
//! (Waldspurger et al., "Cache Modeling and Optimization using Miniature Simulations",
//! USENIX ATC'17: a spatially sampled trace keeps the miss-ratio curve's shape). Every
//! `period` sampled accesses the real cache takes the insertion whose small cache hit most,
//! hits counted with halving so that the last few periods weigh most. For tuning runs the
//! environment may override the period (`LAB_PERIOD`, in small-cache sizes, default 0.25;
//! `LAB_PERIOD_MAX`, 1024), the margin a candidate must win by (`LAB_MARGIN`, 0) and the
//! decay (`LAB_DECAY`, 0.5).

use crate::arc::{Arc, Insert, Options};
use crate::sketch::mix;

/// The miniature caches hold about this many blocks.
const SAMPLE_BLOCKS: u64 = 4096;

pub struct Adaptive {
    main: Arc,
    candidates: Vec<Insert>,
    small: Vec<Arc>,
    scores: Vec<f64>,
    threshold: u64,
    sampled: u64,
    period: u64,
    pub switches: u64,
}

impl Adaptive {
    pub fn new(c: u64, ids: usize, options: Options, candidates: &[Insert]) -> Adaptive {
        let rate = if c <= SAMPLE_BLOCKS {
            1.0
        } else {
            SAMPLE_BLOCKS as f64 / c as f64
        };
        let small_c = ((c as f64 * rate).round() as u64).max(1);
        let small = candidates
            .iter()
            .map(|&insert| Arc::new(small_c, ids, Options { insert, ..options }, true))
            .collect();
        Adaptive {
            main: Arc::new(
                c,
                ids,
                Options {
                    insert: candidates[0],
                    ..options
                },
                true,
            ),
            candidates: candidates.to_vec(),
            small,
            scores: vec![0.0; candidates.len()],
            threshold: if rate >= 1.0 {
                u64::MAX
            } else {
                (rate * u64::MAX as f64) as u64
            },
            sampled: 0,
            period: ((small_c as f64 * env_f64("LAB_PERIOD", 0.25)) as u64)
                .clamp(32, env_f64("LAB_PERIOD_MAX", 1024.0) as u64),
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
                let current = self
                    .candidates
                    .iter()
                    .position(|&i| i == self.main.options.insert)
                    .unwrap_or(0);
                let best = (0..self.scores.len())
                    .max_by(|&a, &b| self.scores[a].total_cmp(&self.scores[b]))
                    .unwrap_or(current);
                if self.scores[best] > self.scores[current] * (1.0 + env_f64("LAB_MARGIN", 0.0)) {
                    self.main.options.insert = self.candidates[best];
                    self.switches += 1;
                }
                for s in &mut self.scores {
                    *s *= env_f64("LAB_DECAY", 0.5);
                }
            }
        }
        self.main.access(x)
    }
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

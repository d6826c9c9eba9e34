//! Choosing a cache's rules by miniature simulation: a sample of the blocks (by a hash of
//! the id; all of them while the cache is at most `SAMPLE_BLOCKS`) runs through one small
//! cache per candidate rule set, each of the cache's size times the sampling rate
//! (Waldspurger et al., "Cache Modeling and Optimization using Miniature Simulations",
//! USENIX ATC'17: a spatially sampled trace keeps the miss-ratio curve's shape). Every
//! period of sampled accesses the real cache takes the rules whose small cache hit most,
//! hits counted with decay so that the last few periods weigh most. Used over the
//! insertion rules of arc.rs (`adaptive*` variants) and the rule sets of unified.rs
//! (`u-choose`).

use crate::sketch::mix;

/// The miniature caches hold about this many blocks.
const SAMPLE_BLOCKS: u64 = 4096;

/// A cache whose rules can change while it runs.
pub trait Candidate: Sized {
    /// What the chooser picks among.
    type Rules: Copy;
    /// A cache of `c` blocks over ids below `ids`, run by `rules`.
    fn build(c: u64, ids: usize, rules: Self::Rules) -> Self;
    /// One access; true for a hit.
    fn access(&mut self, x: u32) -> bool;
    /// Runs by `rules` from now on.
    fn set_rules(&mut self, rules: Self::Rules);
}

/// When the chooser decides.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// A period of sampled accesses, in small-cache sizes (at least 32 accesses).
    pub period_share: f64,
    /// The longest period, in sampled accesses.
    pub period_max: u64,
    /// How much more a candidate's small cache must hit than the current one's (0.05: 5%).
    pub margin: f64,
    /// What each period leaves of the scores.
    pub decay: f64,
}

pub struct Chooser<C: Candidate> {
    main: C,
    candidates: Vec<C::Rules>,
    small: Vec<C>,
    scores: Vec<f64>,
    threshold: u64,
    sampled: u64,
    period: u64,
    timing: Timing,
    current: usize,
    pub switches: u64,
}

impl<C: Candidate> Chooser<C> {
    /// A cache of `c` blocks over ids below `ids`, starting with `candidates[0]`.
    pub fn new(c: u64, ids: usize, candidates: &[C::Rules], timing: Timing) -> Chooser<C> {
        let rate = if c <= SAMPLE_BLOCKS {
            1.0
        } else {
            SAMPLE_BLOCKS as f64 / c as f64
        };
        let small_c = ((c as f64 * rate).round() as u64).max(1);
        Chooser {
            main: C::build(c, ids, candidates[0]),
            candidates: candidates.to_vec(),
            small: candidates
                .iter()
                .map(|&rules| C::build(small_c, ids, rules))
                .collect(),
            scores: vec![0.0; candidates.len()],
            threshold: if rate >= 1.0 {
                u64::MAX
            } else {
                (rate * u64::MAX as f64) as u64
            },
            sampled: 0,
            period: ((small_c as f64 * timing.period_share) as u64)
                .clamp(32, timing.period_max.max(32)),
            timing,
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
                if self.scores[best] > self.scores[self.current] * (1.0 + self.timing.margin) {
                    self.current = best;
                    self.main.set_rules(self.candidates[best]);
                    self.switches += 1;
                }
                for s in &mut self.scores {
                    *s *= self.timing.decay;
                }
            }
        }
        self.main.access(x)
    }
}

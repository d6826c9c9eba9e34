//! The reuse-distance arithmetic: the log-bucketed histogram (8 buckets per doubling), the
//! Fenwick tree of bytes over access stamps that measures distances, and reading a curve
//! off a histogram or off the miniature ARCs' points.

use crate::Point;

/// Log-spaced buckets per doubling of the reuse-distance histogram.
pub(crate) const SUB_BUCKETS: usize = 8;
/// Buckets: distances up to 2^62 bytes.
pub(crate) const BUCKETS: usize = 62 * SUB_BUCKETS;

/// A Fenwick tree of bytes over access stamps.
#[derive(Clone, Debug)]
pub(crate) struct Fenwick {
    pub(crate) tree: Vec<i64>,
}

impl Fenwick {
    pub(crate) fn new(n: usize) -> Fenwick {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.tree.len() - 1
    }
    pub(crate) fn add(&mut self, at: usize, delta: i64) {
        let mut i = at;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }
    /// Sum of positions 1..=at.
    pub(crate) fn prefix(&self, at: usize) -> i64 {
        let mut i = at.min(self.len());
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i &= i - 1;
        }
        s
    }
}

/// The value at `x` of a curve of `(size, ratio)` points ascending in size, interpolated in
/// log size; past the last point, the last value (a cache that never evicted stands for
/// every larger one); `None` before the first.
pub(crate) fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let first = points.first()?;
    if x < first.0 * 0.999 {
        return None;
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x <= x1 {
            let f = ((x.max(x0)).ln() - x0.ln()) / (x1.ln() - x0.ln()).max(f64::MIN_POSITIVE);
            return Some(y0 + f.clamp(0.0, 1.0) * (y1 - y0));
        }
    }
    points.last().map(|p| p.1)
}

/// Hit ratios at `sizes` from a histogram of reuse distances recorded at `1/R` (`k`:
/// `R / R_eff`; `fix`: SHARDS-adj's weight, added at the shortest distance; `reads`: the
/// histogram's reads, cold ones included).
pub(crate) fn curve_of(
    histogram: &[f64],
    k: f64,
    fix: f64,
    reads: f64,
    sizes: &[u64],
) -> Vec<Point> {
    let total = k * reads + fix;
    if total <= 0.0 {
        return sizes.iter().map(|&s| (s, 0.0)).collect();
    }
    let mut cumulative = vec![0.0; histogram.len() + 1];
    for (i, w) in histogram.iter().enumerate() {
        cumulative[i + 1] = cumulative[i] + w;
    }
    sizes
        .iter()
        .map(|&size| {
            // Buckets wholly at or below `size` (in recorded distances: `size / k`) hit; the
            // shortest carries the correction.
            let (upto, part) = buckets_within(size as f64 / k);
            let partial = histogram.get(upto).map_or(0.0, |w| part * w);
            let mut hits = k * (cumulative[upto] + partial);
            if upto > 0 || part > 0.0 {
                hits += fix;
            }
            (size, (hits / total).clamp(0.0, 1.0))
        })
        .collect()
}

pub(crate) fn bucket_of(distance: f64) -> usize {
    if distance <= 1.0 {
        return 0;
    }
    // Bucket i holds (2^(i/8), 2^((i+1)/8)]: a distance of exactly 2^k fits a cache of 2^k.
    let edge = (distance.log2() * SUB_BUCKETS as f64).ceil() as usize;
    edge.saturating_sub(1).min(BUCKETS - 1)
}

/// How many buckets hold only distances at most `size`, and the share (in log size) of the
/// next one below `size`: its weight counts in that proportion, so a size between two
/// bucket edges does not jump to either.
pub(crate) fn buckets_within(size: f64) -> (usize, f64) {
    if size < 1.0 {
        return (0, 0.0);
    }
    let edge = size.log2() * SUB_BUCKETS as f64;
    // Guard against 2^k landing a hair below its integer.
    let whole = (edge + 1e-9).floor();
    if whole as usize >= BUCKETS {
        return (BUCKETS, 0.0);
    }
    (whole as usize, (edge - whole).max(0.0))
}

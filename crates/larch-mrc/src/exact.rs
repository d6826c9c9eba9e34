//! Exact curves, for checking the sampled ones: every access kept, every size replayed.

use std::collections::HashMap;

use larch_policy::{Arc, ArcConfig, BlockKey};

use crate::histogram::Fenwick;
use crate::{Access, Point};

/// The exact LRU hit ratio of reads at each size, from exact reuse distances.
pub fn lru_curve(accesses: &[Access], sizes: &[u64]) -> Vec<Point> {
    let mut last: HashMap<BlockKey, (usize, u32)> = HashMap::new();
    let mut tree = Fenwick::new(accesses.len() + 1);
    let mut distances = Vec::new();
    let mut reads = 0u64;
    for (i, a) in accesses.iter().enumerate() {
        let stamp = i + 1;
        let bytes = a.bytes.max(1);
        if let Some(&(prev, prev_bytes)) = last.get(&a.key) {
            if !a.write {
                let between = tree.prefix(stamp - 1) - tree.prefix(prev);
                distances.push(between as u64 + u64::from(bytes));
            }
            tree.add(prev, -i64::from(prev_bytes));
        }
        if !a.write {
            reads += 1;
        }
        tree.add(stamp, i64::from(bytes));
        last.insert(a.key, (stamp, bytes));
    }
    distances.sort_unstable();
    sizes
        .iter()
        .map(|&s| {
            let hits = distances.partition_point(|&d| d <= s);
            (
                s,
                if reads == 0 {
                    0.0
                } else {
                    hits as f64 / reads as f64
                },
            )
        })
        .collect()
}

/// The exact ARC hit ratio of reads at each size: a full-size ARC replayed per size.
pub fn arc_curve(accesses: &[Access], sizes: &[u64], template: &ArcConfig) -> Vec<Point> {
    sizes
        .iter()
        .map(|&size| {
            let mut arc = Arc::new(ArcConfig {
                c_min_bytes: size,
                c_max_bytes: size,
                ..template.clone()
            })
            .expect("valid size");
            let mut actions = Vec::new();
            let (mut hits, mut reads) = (0u64, 0u64);
            for a in accesses {
                let access = a.arc_access();
                let hit = arc.access(&access, &mut actions).is_hit();
                actions.clear();
                if !a.write {
                    reads += 1;
                    hits += u64::from(hit);
                }
            }
            (
                size,
                if reads == 0 {
                    0.0
                } else {
                    hits as f64 / reads as f64
                },
            )
        })
        .collect()
}

/// Mean absolute difference of two curves' hit ratios, in points (0..100).
pub fn mean_abs_error_points(a: &[Point], b: &[Point]) -> f64 {
    let n = a.len().min(b.len());
    if n == 0 {
        return 0.0;
    }
    100.0 * a.iter().zip(b).map(|(x, y)| (x.1 - y.1).abs()).sum::<f64>() / n as f64
}

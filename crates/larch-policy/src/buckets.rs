//! The latency scale every histogram of larch uses: four buckets per power of two from
//! 1 µs to 2^24 µs (about 16.8 s), exact at every power of two. The engine's histograms,
//! the daemon's history and the simulator's heat maps share it, so a simulated run and a
//! measured one read alike (and open in the same page). Bucket 0 counts operations of at
//! most 1 µs; bucket `i` those over [`upper_ns`]`(i - 1)` and at most `upper_ns(i)`, which
//! is 2^(i/4) µs rounded up to a nanosecond; the last bucket those over 2^24 µs.

/// Buckets per power of two.
pub const PER_OCTAVE: usize = 4;
/// Powers of two the bounded buckets span (1 µs to 2^24 µs).
pub const OCTAVES: usize = 24;
/// Number of bounds: 1 µs, then four per power of two up to 2^24 µs.
const BOUNDS: usize = OCTAVES * PER_OCTAVE + 1;
/// Number of buckets: one per bound and one for longer operations.
pub const BUCKETS: usize = BOUNDS + 1;

/// 2^(j/4) for j = 0..4, scaled by 10^9 (the fractional steps within a power of two).
const STEPS: [u64; PER_OCTAVE] = [1_000_000_000, 1_189_207_115, 1_414_213_562, 1_681_792_831];

/// The upper bounds of the bounded buckets, in nanoseconds.
const BOUNDS_NS: [u64; BOUNDS] = {
    let mut bounds = [0u64; BOUNDS];
    let mut i = 0;
    while i < BOUNDS {
        // 1000 ns * 2^(i/4), rounded up: 2^octave * step / 10^6.
        let scaled = (1u64 << (i / PER_OCTAVE)) * STEPS[i % PER_OCTAVE];
        bounds[i] = scaled.div_ceil(1_000_000);
        i += 1;
    }
    bounds
};

/// Upper bound of bucket `i` in nanoseconds; `None` for the last (unbounded) bucket.
pub fn upper_ns(i: usize) -> Option<u64> {
    BOUNDS_NS.get(i).copied()
}

/// Lower bound (exclusive) of bucket `i` in nanoseconds.
pub fn lower_ns(i: usize) -> u64 {
    if i == 0 { 0 } else { BOUNDS_NS[i - 1] }
}

/// The bucket of an operation that took `ns` nanoseconds.
pub fn of(ns: u64) -> usize {
    BOUNDS_NS.partition_point(|&upper| upper < ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_quarter_octaves_exact_at_powers_of_two() {
        for k in 0..=OCTAVES {
            assert_eq!(upper_ns(k * PER_OCTAVE), Some(1000 << k));
        }
        for i in 1..BUCKETS - 1 {
            assert_eq!(lower_ns(i), upper_ns(i - 1).unwrap());
            assert_eq!(of(upper_ns(i).unwrap()), i);
            assert_eq!(of(upper_ns(i).unwrap() + 1), i + 1);
        }
        assert_eq!(of(0), 0);
        assert_eq!(of(u64::MAX), BUCKETS - 1);
        assert_eq!(upper_ns(BUCKETS - 1), None);
    }
}

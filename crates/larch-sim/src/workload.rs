//! Synthetic workloads: a deterministic random source and a Zipf sampler.

/// SplitMix64: a small, fast, deterministic generator. The simulator needs the same
/// sequence on every run and machine, not cryptographic quality.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform value in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Zipf-distributed ranks in [0, n): rank 0 is the most popular, and rank `i` is drawn with
/// probability proportional to `1 / (i + 1)^theta`. Uses the closed-form approximation of
/// Gray et al. ("Quickly generating billion-record synthetic databases", 1994): O(n) set-up,
/// O(1) per sample.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipf {
    /// A sampler over `n` items with skew `theta` (0 < theta < 1; 0.9 is a common choice).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 2, "Zipf needs at least 2 items, got {n}");
        assert!(
            theta > 0.0 && theta < 1.0,
            "Zipf theta {theta} outside (0, 1)"
        );
        let zeta = |count: u64| {
            (1..=count)
                .map(|i| 1.0 / (i as f64).powf(theta))
                .sum::<f64>()
        };
        let zeta_n = zeta(n);
        let zeta_2 = zeta(2);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n),
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// The skew.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Draws one rank.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = SplitMix64::new(1);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
        }
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let zipf = Zipf::new(10_000, 0.9);
        let mut rng = SplitMix64::new(42);
        let mut counts = vec![0u64; 10_000];
        for _ in 0..200_000 {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        // The head is far more popular than the tail, and rank 0 is the most popular.
        let head: u64 = counts[..100].iter().sum();
        let tail: u64 = counts[9_900..].iter().sum();
        assert!(head > 20 * tail.max(1), "head {head} tail {tail}");
        assert_eq!(counts.iter().max(), Some(&counts[0]));
    }
}
